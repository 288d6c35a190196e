"""Liveness by progress: heartbeats of each host's worker and of the scheduler.

A worker process can live while its broker connection is dead (Celery's reconnect is
known to hang), so "the process exists" says little. Each worker therefore keeps a
heartbeat in Redis (``P:beat:<host>``, :mod:`bus.store.keys`): ``beat`` from its main process
every few seconds, ``progress`` each time one of its processes finished a task. The
scheduler keeps one too (``P:beat:scheduler.<host>``, progress per tick). A name
without a beat for ``INBOX_HOST_DOWN_S`` is ``down`` (:func:`bus.core.status_view.beat_state`). ``inbox status``,
``/health`` and ``/metrics`` show each one's age and its host queue's depth, and the
supervisor (:mod:`bus.ops.supervise`) restarts a worker whose queue holds work while its
progress is older than a bound (:func:`stalled`, pure).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Protocol

from bus.core.models import now_ms
from bus.core.status_view import HOST_DOWN_S, queue_of, worker_rows
from bus.core.status_view import SCHEDULER as SCHEDULER
from bus.core.status_view import host_queue as host_queue
from bus.core.version import __version__
from bus.store.redis_errors import StoreError

if TYPE_CHECKING:
    from bus.store.store import Store

log = logging.getLogger(__name__)

BEAT_EVERY_S = 2.0
PROGRESS_EVERY_S = 1.0  # progress is written at most this often per process


class HasStore(Protocol):
    """Anything with the store (heartbeats, the metrics collector, the services)."""

    @property
    def store(self) -> Store: ...


# The Celery queues (workers.app uses these names): the shared one, and each host's own
# (``host_queue``).
SHARED_QUEUE = "inbox"


# A worker not yet ready is judged against this many times the stall bound (stalled),
# and never less than BOOT_MIN_S: a short stall bound (INBOX_WORKER_STALL_S=2) is no
# bound on a boot, which takes seconds on a loaded machine (bench/README.md).
BOOT_FACTOR = 3
BOOT_MIN_S = 60.0
# A ready worker whose processes used at least this share of a core over the bound is
# starved (a saturated machine: a batch outlasts the bound), not stalled: its kill would
# redo its work, and carry again a notice a listener acked before its record. A hung
# worker (the case the bound is for) uses about none, and so does an idle one.
BUSY_SHARE = 0.02


def stalled(
    *,
    queued: int,
    progress_ms: int | None,
    started_ms: int,
    now: int,
    bound_s: float,
    booted: bool = True,
    cpu_share: float | None = None,
) -> bool:
    """A worker holds work (its queue is not empty) and made no progress for ``bound_s``.

    Progress counts from the later of its last finished task and its start, so a worker
    that just (re)started has the whole bound to take its first task. One that has not
    said it is ready since it started (``booted`` False: still importing and forking its
    pool, which takes seconds on a loaded machine) gets :data:`BOOT_FACTOR` times the
    bound from its start, at least :data:`BOOT_MIN_S`: killed sooner, each restart would
    be killed before it could ever be ready, while its queue only grows. A ready one that
    used ``cpu_share`` of a core over the bound, at least :data:`BUSY_SHARE` (``None``:
    not known), is working, only slowly: not stalled.
    """
    if queued <= 0:
        return False
    if not booted:
        return now - started_ms > max(bound_s * BOOT_FACTOR, BOOT_MIN_S) * 1000
    since = max(progress_ms or 0, started_ms)
    if cpu_share is not None and cpu_share >= BUSY_SHARE:
        return False
    return now - since > bound_s * 1000


class Heartbeat:
    """Writes one name's heartbeat; every write swallows Redis errors (it is advisory)."""

    def __init__(self, bus: HasStore, name: str) -> None:
        self.store: Store = bus.store
        self.name = name
        self._last_progress = 0.0
        self._stop = threading.Event()

    def beat(self, *, started: bool = False) -> None:
        """The process is alive (``started``: it just started; records pid and start)."""
        now = now_ms()
        fields: dict[str, Any] = {"beat": now, "pid": os.getpid()}
        if started:
            fields["started"] = now
            fields["version"] = __version__  # the release this host runs (inbox status)
        try:
            self.store.schedule.beat(self.name, fields)
        except StoreError:
            pass

    def progress(self) -> None:
        """A task (or a scheduler tick) finished; written at most once a second."""
        t = time.monotonic()
        if t - self._last_progress < PROGRESS_EVERY_S:
            return
        self._last_progress = t
        now = now_ms()
        try:
            self.store.schedule.beat(self.name, {"progress": now, "beat": now}, done=True)
        except StoreError:
            self._last_progress = 0.0

    def start(self, every_s: float = BEAT_EVERY_S) -> Heartbeat:
        """Beat in a background thread until :meth:`stop`."""
        self.beat(started=True)

        def loop() -> None:
            while not self._stop.wait(every_s):
                self.beat()

        threading.Thread(target=loop, name=f"heartbeat-{self.name}", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()


def workers(store: Store, down_s: float = HOST_DOWN_S) -> list[dict[str, Any]]:
    """Each heartbeat's state (``up``/``down`` past ``down_s``), ages (seconds) and, for a
    host, its queue's depth, the floor that serves it (``floor``: machine, home, pid) and
    the last worker refused it (``refused``)."""
    return worker_rows(store.schedule.beats(queue_of), now_ms(), store.schedule.host_floors, down_s)
