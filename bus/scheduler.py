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
from typing import TYPE_CHECKING, Any

from . import confirm
from .clock import SYSTEM, Clock
from .compact import compact_all
from .dispatch import deliver_many
from .liveness import SCHEDULER, Heartbeat
from .models import now_ms
from .outage import OUTAGE_ERRORS, Outage

if TYPE_CHECKING:
    from .api import Bus

log = logging.getLogger(__name__)

SWEEP_EVERY_S = 5.0


def tick(bus: Bus, *, sweep: bool | None = None, clock: Clock = SYSTEM) -> dict[str, Any]:
    """Dispatch deliveries for due entries; every few seconds also sweep for backlogs.

    The sweep's interval is kept in Redis (:meth:`Store.claim_sweep`), so however many
    schedulers and worker pool children tick, one of them sweeps per interval.
    """
    store = bus.store
    taken = store.take_due(clock.now_ms())
    dispatched = 0
    for host, sids in _by_host(bus, [sid for _what, sid in taken]).items():
        log.debug("due on %s: %s", host, sids)
        deliver_many(bus.dispatcher, host, sids)
        dispatched += len(sids)
    swept = 0
    if sweep or (sweep is None and store.claim_sweep(int(SWEEP_EVERY_S * 1000))):
        swept = sweep_backlogs(bus, clock=clock)
    # Messages no notice got in for INBOX_EXPIRE_S end expired (at most once a minute).
    expired = bus.receipts.expire_all(force=bool(sweep))
    # Quiet sessions' short streams shrunk to their entries (at most once a minute).
    compacted = compact_all(store, force=bool(sweep))
    return {
        "taken": len(taken),
        "dispatched": dispatched,
        "swept": swept,
        "expired": expired,
        "compacted": compacted,
    }


def _by_host(bus: Bus, sids: list[str]) -> dict[str, list[str]]:
    """The due sessions that still exist, by host, in due order; each one's dispatch flag
    set (the trigger must reach the delivery even when a flag is still set). Two round
    trips for the lot, not two per session: a burst of wakes is dispatched at once."""
    store = bus.store
    sids = list(dict.fromkeys(sids))  # a wake and a retry of one session: one delivery
    if not sids:
        return {}
    hosts = store.session_hosts(sids)
    out: dict[str, list[str]] = {}
    for sid, host in zip(sids, hosts, strict=True):
        if host is None:
            continue
        out.setdefault(str(host), []).append(sid)
    store.flag_dispatched(sid for sid, host in zip(sids, hosts, strict=True) if host is not None)
    return out


def sweep_backlogs(bus: Bus, *, clock: Clock = SYSTEM) -> int:
    """Dispatch a delivery for every session with work no delivery took.

    The safety net under the dispatch flag: a queue entry whose delivery was lost with its
    broker message (or sent with no dispatcher), or a notice left in flight by a worker
    that died, is still delivered.
    """
    store = bus.store
    stale_before = clock.now_ms() - int(bus.settings.lock_ttl_s * 1000)
    kicked = 0
    for info in store.sessions():
        sid = info.session
        backlog = bool(store.read_after(sid, store.cursor(sid), 1))
        flight_at, has_new, due_at, retry_at, floor_records = store.sweep_view(sid)
        stuck = flight_at is not None and flight_at < stale_before
        # Notices on the floor not yet confirmed: the delivery looks whether a dead
        # drainer took one (bus.confirm), so its messages are carried again in time.
        stuck = stuck or confirm.any_needs_look(floor_records, now_ms())
        # A wake whose worker died before its command ran (bus.inbox: wake_pending).
        stuck = stuck or bool(info.wake_pending)
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


def run(
    bus: Bus,
    stop: threading.Event | None = None,
    *,
    max_sleep_s: float = 0.5,
    clock: Clock = SYSTEM,
) -> None:
    """The ``inbox scheduler`` loop: tick, then sleep until the next due time (capped)."""
    stop = stop or threading.Event()
    log.info("scheduler running (prefix %s)", bus.settings.key_prefix)
    outage = Outage("scheduler", log)
    beat = Heartbeat(bus, SCHEDULER)
    beat.beat(started=True)
    while not stop.is_set():
        try:
            tick(bus, clock=clock)
            nxt = bus.store.next_due()
            beat.progress()
            outage.ok()
        except OUTAGE_ERRORS as exc:  # Redis restarting: one line per outage, not per tick
            outage.failed(exc)
            nxt = None
        # Broad on purpose: the dispatcher's transport error (kombu's, which bus/ does not
        # import) must not end the loop; the log says what it was.
        except Exception:
            log.exception("scheduler tick failed")
            nxt = None
        delay = (
            max_sleep_s
            if nxt is None
            else min(max_sleep_s, max(0.0, (nxt - clock.now_ms()) / 1000))
        )
        stop.wait(delay if delay > 0 else 0.01)
