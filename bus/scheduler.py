"""Scheduled work: debounced wakes, FYI flushes and retries, kept in Redis.

The schedule is a sorted set (``P:due``) of ``<what>|<sid>`` due times, so it survives a
worker or scheduler restart; nothing depends on in-memory timers, countdowns or
``revoke``. :func:`tick` takes due entries atomically (one Lua script), so two schedulers
running at once never trigger the same wake twice. A trigger only dispatches the
session's delivery, which decides again from the stored state, so even a repeated
trigger cannot wake a session twice.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from .liveness import SCHEDULER, Heartbeat
from .models import now_ms
from .outage import OUTAGE_ERRORS, Outage

if TYPE_CHECKING:
    from .api import Bus

log = logging.getLogger(__name__)

SWEEP_EVERY_S = 5.0
_last_sweep = 0.0


def tick(bus: Bus, *, sweep: bool | None = None) -> dict[str, Any]:
    """Dispatch deliveries for due entries; every few seconds also sweep for backlogs."""
    global _last_sweep
    store = bus.store
    taken = store.take_due(now_ms())
    dispatched = 0
    for what, sid in taken:
        info = store.get_session(sid)
        if info is None:
            continue
        log.debug("due %s for %s", what, sid)
        # The trigger must reach the delivery even when a dispatch flag is still set.
        store.mark_pending(sid)
        bus.dispatcher.deliver(info.host, sid)
        dispatched += 1
    swept = 0
    now = time.monotonic()
    if sweep or (sweep is None and now - _last_sweep >= SWEEP_EVERY_S):
        _last_sweep = now
        swept = sweep_backlogs(bus)
    return {"taken": len(taken), "dispatched": dispatched, "swept": swept}


def sweep_backlogs(bus: Bus) -> int:
    """Dispatch a delivery for every session with work no delivery took.

    The safety net under the dispatch flag: a queue entry whose delivery was lost with its
    broker message (or sent with no dispatcher), or a notice left in flight by a worker
    that died, is still delivered.
    """
    store = bus.store
    stale_before = now_ms() - int(bus.settings.lock_ttl_s * 1000)
    kicked = 0
    for info in store.sessions():
        sid = info.session
        backlog = bool(store.read_after(sid, store.cursor(sid), 1))
        pipe = store.r.pipeline(transaction=False)
        pipe.hget(store.k.s(sid, "notice"), "at")
        pipe.exists(store.k.s(sid, "new"))
        for what in ("due", "retry"):
            pipe.zscore(store.k.due, f"{what}|{sid}")
        flight_at, has_new, due_at, retry_at = pipe.execute()
        stuck = flight_at is not None and int(flight_at) < stale_before
        # New messages with nothing scheduled: a due entry taken by a scheduler whose
        # dispatch then failed. The delivery plans (and schedules) again.
        orphaned = (
            bool(has_new)
            and due_at is None
            and retry_at is None
            and not flight_at
            and not info.prompt_waiting  # waits for its prompt's turn on purpose
        )
        if (backlog or stuck or orphaned) and store.mark_pending(sid):
            bus.dispatcher.deliver(info.host, sid)
            kicked += 1
    return kicked


def run(bus: Bus, stop: threading.Event | None = None, *, max_sleep_s: float = 0.5) -> None:
    """The ``inbox scheduler`` loop: tick, then sleep until the next due time (capped)."""
    stop = stop or threading.Event()
    log.info("scheduler running (prefix %s)", bus.settings.key_prefix)
    outage = Outage("scheduler", log)
    beat = Heartbeat(bus, SCHEDULER)
    beat.beat(started=True)
    while not stop.is_set():
        try:
            tick(bus)
            nxt = bus.store.next_due()
            beat.progress()
            outage.ok()
        except OUTAGE_ERRORS as exc:  # Redis restarting: one line per outage, not per tick
            outage.failed(exc)
            nxt = None
        except Exception:  # keep scheduling through anything else; the log says why
            log.exception("scheduler tick failed")
            nxt = None
        delay = max_sleep_s if nxt is None else min(max_sleep_s, max(0.0, (nxt - now_ms()) / 1000))
        stop.wait(delay if delay > 0 else 0.01)
