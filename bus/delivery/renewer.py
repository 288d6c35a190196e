"""One thread a process renews the leases of every running delivery batch.

A batch's sessions each hold a lease (bus.delivery.lease) that must be extended every third
of its TTL while the batch runs. A thread started for each batch cost a lone delivery more
than its Redis calls (a thread's start and join are two hand-offs of the GIL and a clone);
most batches end long before their first renewal is due. So a process keeps ONE renewer
per store: a batch registers its leases and unregisters them when done; every interval the
renewer extends, in one round trip, the leases of the batches that have been running for
at least half an interval.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from bus.store.redis_errors import StoreFailed

if TYPE_CHECKING:
    from bus.store.store import Store

    from .lease import Lease

log = logging.getLogger(__name__)

# Passes with nothing registered before the thread ends (the next batch starts another).
IDLE_PASSES = 30


class Run(Protocol):
    """A batch's run of one session: its lease, and whether it is over (unlocked)."""

    lease: Lease
    done: bool


class Renewer:
    """Extends the registered batches' leases every ``interval`` seconds."""

    def __init__(self, store: Store, interval: float) -> None:
        self.store = store
        self.interval = interval
        self._lock = threading.Lock()
        self._batches: dict[int, tuple[float, Sequence[Run]]] = {}
        self._next = 0
        self._thread: threading.Thread | None = None

    def add(self, runs: Sequence[Run]) -> int:
        """Keep the leases of ``runs`` not done renewed until :meth:`remove` of the
        returned handle."""
        with self._lock:
            self._next += 1
            handle = self._next
            self._batches[handle] = (time.monotonic(), runs)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="batch-leases", daemon=True)
                self._thread.start()
        return handle

    def remove(self, handle: int) -> None:
        with self._lock:
            self._batches.pop(handle, None)

    def _run(self) -> None:
        idle = 0
        while idle < IDLE_PASSES:
            time.sleep(self.interval)
            self.renew_due()
            with self._lock:
                idle = 0 if self._batches else idle + 1
                if idle >= IDLE_PASSES:
                    self._thread = None

    def renew_due(self) -> int:
        """One pass: the leases of batches older than half an interval, in one round
        trip; a lease found held by another is lost (its run writes nothing more). How
        many were asked."""
        old = time.monotonic() - self.interval / 2
        with self._lock:
            live = [
                run
                for started, runs in self._batches.values()
                if started <= old
                for run in runs
                if not run.done and not run.lease.lost
            ]
        if not live:
            return 0
        sent_at = time.monotonic()
        try:
            answers = self.store.delivery.extend_many([(r.lease.sid, r.lease.token) for r in live])
        except StoreFailed as exc:  # a blip: the next pass tries again, the fences decide
            log.info("batch lease renewal failed (%s); trying again", exc)
            return 0
        for run, ok in zip(live, answers, strict=True):
            if not run.done:  # unlocked meanwhile: its key is gone, not lost
                run.lease.confirmed(ok, sent_at)
        return len(live)


_RENEWERS: weakref.WeakKeyDictionary[Any, Renewer] = weakref.WeakKeyDictionary()
_RENEWERS_LOCK = threading.Lock()


def renewer_for(store: Store, make: Callable[[], Renewer] | None = None) -> Renewer:
    """The process's renewer for ``store`` (made on first use)."""
    with _RENEWERS_LOCK:
        found = _RENEWERS.get(store)
        if found is None:
            found = make() if make else Renewer(store, max(0.05, store.lock_ttl_ms / 3000))
            _RENEWERS[store] = found
        return found


__all__ = ["Renewer", "renewer_for"]
