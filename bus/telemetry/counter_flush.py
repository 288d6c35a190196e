"""Counter additions held in process memory and written to Redis every few tenths of a
second, for a process that writes them often (a worker's delivery loops).

Written at once, a lone delivery's 3-5 counters would take a round trip of their own (on
a cluster one per node holding a counter hash), a share of its CPU worth saving. Held here
they are summed per field, so what waits is bounded by the number of distinct fields, whatever the rate, and
one write carries a flush period's deliveries. A process killed outright loses at most
its last period's counts; they are telemetry, never delivery state.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

Writes = list[tuple[str, str, float]]


class HeldCounters:
    """Additions ``(hash name, field, n)`` summed per field and written by ``write`` (one
    round trip for all) every ``period_s`` from a thread of its own, and at exit."""

    def __init__(self, write: Callable[[Writes], object], period_s: float) -> None:
        if period_s <= 0:
            raise ValueError("a flush period must be more than 0 seconds")
        self._write = write
        self.period_s = period_s
        self._held: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        # A forked child (a prefork pool process) has no flush thread and a lock that may
        # have been held at the fork: fresh ones, and nothing of the parent's counts.
        os.register_at_fork(after_in_child=self._after_fork)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()
        self._held = {}
        self._thread = None

    def add(self, writes: Writes) -> None:
        """Hold ``writes`` until the next flush."""
        with self._lock:
            for name, field, n in writes:
                key = (name, field)
                self._held[key] = self._held[key] + n if key in self._held else n
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="counter-flush", daemon=True)
                self._thread.start()
                atexit.register(self.close)

    def pending(self) -> Writes:
        """What is held, in first-added order."""
        with self._lock:
            return [(name, field, n) for (name, field), n in self._held.items()]

    def flush(self) -> bool:
        """Write what is held now; False when Redis did not take it (it is held again,
        added to what came since)."""
        with self._lock:
            taken, self._held = self._held, {}
        if not taken:
            return True
        writes = [(name, field, n) for (name, field), n in taken.items()]
        try:
            self._write(writes)
        except Exception as exc:  # counts are kept whatever the failure
            log.debug("counters not written (%s); held for the next flush", exc)
            self.add(writes)
            return False
        return True

    def close(self) -> None:
        """Stop the thread and write what is held (at exit, a worker's shutdown)."""
        self._stop.set()
        self.flush()

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self.flush()
