"""Scheduled work: debounced wakes, FYI flushes, retries and wakes' turns, kept in Redis.

A wake's turn entry falls due ``INBOX_WAKE_TURN_TIMEOUT_S`` after the wake: a session still
running on that wake, its harness having reported no turn (none was there to take it),
is set idle again and delivered (:meth:`~bus.store.schedule.ScheduleStore.end_unheard_wakes`).

The schedule is a sorted set (``P:due``) of ``<what>|<sid>`` due times, so it survives a
worker or scheduler restart; nothing depends on in-memory timers, countdowns or
``revoke``. :func:`tick` takes due entries atomically (one Lua script), so two schedulers
running at once never trigger the same wake twice. A trigger only dispatches the
session's delivery, which decides again from the stored state, so even a repeated
trigger cannot wake a session twice.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from bus.core.clock import SYSTEM, Clock
from bus.core.models import SessionInfo, now_ms
from bus.core.status_view import scheduler_beat
from bus.store.compaction import compact_all
from bus.store.many import SweepView
from bus.store.outage_log import OUTAGE_ERRORS, Outage, waits_out
from bus.store.schedule import WAKE_TURN
from bus.store.server_memory import Keeper
from bus.telemetry.liveness import Heartbeat

from . import heard
from .dispatch import made_now, request_many
from .due_taker import Taker, taker_name

if TYPE_CHECKING:
    from bus.core.settings import Settings
    from bus.store.store import Store

    from .dispatch import Dispatcher
    from .receipts import Receipts

log = logging.getLogger(__name__)


class Scheduled(Protocol):
    """What the scheduled work uses: the settings, the store, receipts and the dispatcher."""

    settings: Settings
    receipts: Receipts

    @property
    def store(self) -> Store: ...

    @property
    def dispatcher(self) -> Dispatcher: ...


SWEEP_EVERY_S = 5.0
# Sessions the sweep reads per round trip (due entries are taken between chunks).
SWEEP_CHUNK = 200
# Within a tick, due entries are taken again (between the sweep's chunks, after each
# pass) once the last take is this old.
DUE_AGAIN_MS = 20
# The poke thread's BLPOP waits this long at most, then looks at its stop event.
POKE_WAIT_S = 1.0


def tick(
    bus: Scheduled,
    *,
    sweep: bool | None = None,
    clock: Clock = SYSTEM,
    taker: Taker | None = None,
) -> dict[str, Any]:
    """Dispatch deliveries for due entries; every few seconds also sweep for backlogs.

    The sweep's interval is kept in Redis (:meth:`Store.schedule.claim_sweep`), so however many
    schedulers and worker pool children tick, one of them sweeps per interval. Due entries
    are taken again between the sweep's chunks and after each pass: over thousands of
    sessions a sweep takes seconds, and a wake due meanwhile must not wait for its end.
    With ``taker`` (the scheduler loop's) due entries are taken only while it holds the
    taker claim (:mod:`bus.delivery.due_taker`).
    """
    store = bus.store
    counts = {"taken": 0, "dispatched": 0, "at": 0}

    def due(*, always: bool = False) -> None:
        # Again only once the last take is DUE_AGAIN_MS old: a pass that found nothing
        # to do costs no more round trips than it did.
        if not always and clock.now_ms() - counts["at"] < DUE_AGAIN_MS:
            return
        counts["at"] = clock.now_ms()
        taken, dispatched = dispatch_due(bus, clock=clock, taker=taker)
        counts["taken"] += taken
        counts["dispatched"] += dispatched

    due(always=True)
    swept = 0
    if sweep or (sweep is None and store.schedule.claim_sweep(int(SWEEP_EVERY_S * 1000))):
        swept = sweep_backlogs(bus, clock=clock, between=due)
    # Messages no notice got in for INBOX_EXPIRE_S end expired (at most once a minute).
    expired = bus.receipts.expire_all(force=bool(sweep), between=due)
    due()
    # Quiet sessions' short streams shrunk to their entries (at most once a minute, a
    # few chunks a tick: bus.store.compaction.BUDGET_S).
    keep_ms = int(bus.settings.events_keep_s * 1000)
    compacted = compact_all(
        store,
        force=bool(sweep),
        quiet_ms=keep_ms,
        sub_idle_ms=int(bus.settings.sub_idle_s * 1000),
    )
    due()
    del counts["at"]
    return {**counts, "swept": swept, "expired": expired, "compacted": compacted}


def dispatch_due(
    bus: Scheduled, *, clock: Clock = SYSTEM, taker: Taker | None = None
) -> tuple[int, int]:
    """Take the entries due now (``taker``: while it holds the claim) and dispatch their
    sessions' deliveries, a host's at once: ``(taken, dispatched)``."""
    now = clock.now_ms()
    taken = bus.store.schedule.take_due(now) if taker is None else taker.take(bus.store, now)
    due = [sid for what, sid in taken if what != WAKE_TURN]
    turns = [sid for what, sid in taken if what == WAKE_TURN]
    if turns:
        # Wakes whose turn never began: idle again, and delivered (what waited for the
        # turn's end, on the floor or new, wakes it when a harness can be there).
        cutoff = now - int(bus.settings.wake_turn_timeout_s * 1000)
        due += bus.store.schedule.end_unheard_wakes(turns, cutoff, now)
    dispatched = 0
    for host, sids in _by_host(bus, due).items():
        log.debug("due on %s: %s", host, sids)
        request_many(bus.dispatcher, host, sids)
        dispatched += len(sids)
    return len(taken), dispatched


def _by_host(bus: Scheduled, sids: list[str]) -> dict[str, list[str]]:
    """The due sessions that still exist, by host, in due order; each one's dispatch flag
    set (the trigger must reach the delivery even when a flag is still set). One round
    trip for the lot (:meth:`~bus.store.queue.QueueStore.hosts_flagged`), not two per
    session: a burst of wakes is dispatched at once."""
    store = bus.store
    sids = list(dict.fromkeys(sids))  # a wake and a retry of one session: one delivery
    if not sids:
        return {}
    out: dict[str, list[str]] = {}
    for sid, host in zip(sids, store.queue.hosts_flagged(sids), strict=True):
        if host is not None:
            out.setdefault(host, []).append(sid)
    return out


def needs_delivery(info: SessionInfo, view: SweepView, stale_before: int, now: int) -> bool:
    """Whether the sweep dispatches a delivery for a session: work no delivery took."""
    stuck = view.flight_at is not None and view.flight_at < stale_before
    # Notices on the floor not yet confirmed: the delivery looks whether a dead drainer
    # took one (bus.delivery.heard), so its messages are carried again in time.
    stuck = stuck or heard.any_needs_look(view.floor_records, now, info.last_seen)
    # A wake whose worker died before its command ran (bus.delivery.inbox: wake_pending).
    stuck = stuck or bool(info.wake_pending)
    # New messages with nothing scheduled: a due entry taken by a scheduler whose dispatch
    # then failed. The delivery plans (and schedules) again.
    orphaned = (
        view.has_new
        and view.due_at is None
        and view.retry_at is None
        and not view.flight_at
        and not info.prompt_waiting  # waits for its prompt's turn on purpose
    )
    return view.backlog or stuck or orphaned


def sweep_backlogs(
    bus: Scheduled, *, clock: Clock = SYSTEM, between: Callable[[], object] | None = None
) -> int:
    """Dispatch a delivery for every session with work no delivery took.

    The safety net under the dispatch flag: a queue entry whose delivery was lost with its
    broker message (or sent with no dispatcher), or a notice left in flight by a worker
    that died, is still delivered. A chunk of sessions is tested on the server in one round
    trip (most are quiet), those with anything to look at read in one more, their
    flags set in one more and their deliveries dispatched a host's at once; ``between``
    runs after each chunk (the scheduler takes due entries there).
    """
    store = bus.store
    stale_before = clock.now_ms() - int(bus.settings.lock_ttl_s * 1000)
    ids = store.sessions.session_ids()
    kicked = 0
    for i in range(0, len(ids), SWEEP_CHUNK):
        now = now_ms()
        found = []
        for info, view in store.schedule.sweep_views(
            store.schedule.sweep_candidates(ids[i : i + SWEEP_CHUNK])
        ):
            if not needs_delivery(info, view, stale_before, now):
                continue
            if not _looked_here(bus, info, view, stale_before, now):
                found.append(info)
        marked = store.queue.mark_pending_many([info.session for info in found]) if found else []
        by_host: dict[str, list[str]] = {}
        for info, ok in zip(found, marked, strict=True):
            if ok:
                by_host.setdefault(info.host, []).append(info.session)
        for host, sids in by_host.items():
            request_many(bus.dispatcher, host, sids)
            kicked += len(sids)
        if between is not None:
            between()
    return kicked


def _looked_here(
    bus: Scheduled, info: SessionInfo, view: SweepView, stale_before: int, now: int
) -> bool:
    """A session of this host whose only work is a look at its unconfirmed floor notices
    (bus.delivery.heard) is looked at here, by the scheduler, instead of by a delivery
    task: a look that finds every notice still there (or marks one gone) delivers
    nothing, and is no task (in Flower). True when that was all there was to do; a notice
    given back (or a look that failed) is left to a delivery."""
    inbox = getattr(bus, "inbox", None)
    if inbox is None or info.host != bus.settings.host:
        return False
    if needs_delivery(info, view._replace(floor_records=[]), stale_before, now):
        return False  # other work: the delivery looks too
    try:
        return int(inbox.sweep_floor(info.session)) == 0
    except Exception as exc:  # the delivery looks again, and reports what fails
        log.warning("scheduler: could not look at %s's floor: %s", info.session, exc)
        return False


def run(
    bus: Scheduled,
    stop: threading.Event | None = None,
    *,
    max_sleep_s: float = 0.5,
    clock: Clock = SYSTEM,
) -> None:
    """The ``inbox scheduler`` loop: tick, then sleep until the next due time (capped), or
    until an entry due sooner is scheduled (:class:`Pokes`)."""
    stop = stop or threading.Event()
    log.info("scheduler running (prefix %s)", bus.settings.key_prefix)
    outage = Outage("scheduler", log)
    beat = Heartbeat(bus, scheduler_beat(bus.settings.host))  # each host's own row
    beat.beat(started=True)
    # The dispatcher is made now, its fallback behind the kick list too, not at the first
    # due entry: making the default one imports Celery (a large import on a loaded
    # machine), which the first wake would wait for.
    with contextlib.suppress(Exception):
        made_now(bus.dispatcher)
    pokes = Pokes(bus, stop).start()
    taker = Taker(taker_name(bus.settings.host, bus.settings.home))
    memory = Keeper(bus.store, enabled=bus.settings.memory_settings)
    moved = False
    try:
        while not stop.is_set():
            memory(time.monotonic())  # the server's memory settings, once a minute
            if not moved:  # an earlier version's recipient index, renamed once
                with contextlib.suppress(*OUTAGE_ERRORS):
                    n = bus.store.queue.move_recipient_index()
                    moved = True
                    if n:
                        log.info("moved %d recipient index buckets to their new names", n)
            pokes.poked.clear()  # before the tick: a poke during it makes the sleep short
            took = 0
            try:
                took = tick(bus, clock=clock, taker=taker)["taken"]
                # Not the taker: no due time to wake for, nor the pokes (the taker's).
                pokes.listening(taker.holds)
                nxt = taker.next_due
                beat.progress()
                outage.ok()
            except OUTAGE_ERRORS as exc:  # Redis restarting: one line per outage, not per tick
                outage.failed(exc)
                nxt = None
            # Broad on purpose: the dispatcher's transport error (kombu's, which bus/ does
            # not import) must not end the loop; the log says what it was.
            except Exception as exc:
                if waits_out(exc):  # the store refuses writes: one line until it takes them
                    outage.failed(exc)
                else:
                    log.exception("scheduler tick failed")
                nxt = None
            delay = (
                max_sleep_s
                if nxt is None
                else min(max_sleep_s, max(0.0, (nxt - clock.now_ms()) / 1000))
            )
            if delay > 0:
                pokes.poked.wait(delay)
            elif not took:
                # Due already and none taken (a clock behind the schedule's): no busy loop.
                pokes.poked.wait(0.01)
            # Else entries fell due while the tick ran: straight on. A burst of wakes due
            # over tens of ms is taken as it falls due, not 10 ms a step.
    finally:
        pokes.stop()
        with contextlib.suppress(*OUTAGE_ERRORS):
            taker.release(bus.store)  # another scheduler takes over at its next look


class Pokes:
    """A thread blocked on the poke list (:meth:`~bus.store.delivery.DeliveryStore.wait_poked`,
    ``POKE_WAIT_S`` at a time) that sets ``poked`` for the loop's sleep: without it an entry
    scheduled less than ``max_sleep_s`` ahead while the loop sleeps is up to that late. The
    sleep keeps its own timeout: a blocked client's timeout fires on the server's clock
    tick (up to 100 ms late at Redis's default ``hz`` of 10)."""

    def __init__(self, bus: Scheduled, stop: threading.Event) -> None:
        self.bus = bus
        self.poked = threading.Event()
        # Cleared while another scheduler takes the due entries: a poke is for the taker.
        self._listening = threading.Event()
        self._listening.set()
        self._stop = stop
        self._thread = threading.Thread(target=self._run, name="scheduler-pokes", daemon=True)

    def start(self) -> Pokes:
        self._thread.start()
        return self

    def listening(self, on: bool) -> None:
        """Take pokes (this scheduler takes the due entries) or leave them."""
        if on:
            self._listening.set()
        else:
            self._listening.clear()

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self._listening.is_set():
                self._listening.wait(POKE_WAIT_S)
                continue
            try:
                if not self.bus.store.schedule.wait_poked(POKE_WAIT_S):
                    continue
                if self._listening.is_set():
                    self.poked.set()
                else:  # left the pokes while this wait ran: this one is the taker's
                    self.bus.store.schedule.poke_scheduler(0)
            except OUTAGE_ERRORS:  # the loop's tick says so, once per outage
                self._stop.wait(POKE_WAIT_S)
            # Broad on purpose, as the loop's: the sleep then only waits out its time.
            except Exception:
                log.exception("scheduler poke wait failed")
                self._stop.wait(POKE_WAIT_S)

    def stop(self) -> None:
        """End the thread: its wait ended by a poke of its own (another scheduler, if
        any, ticks once more for it)."""
        with contextlib.suppress(*OUTAGE_ERRORS):
            self.bus.store.schedule.poke_scheduler(0)
        self._thread.join(POKE_WAIT_S + 1)
