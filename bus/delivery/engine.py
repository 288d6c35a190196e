"""The one delivery engine: sessions delivered as a batch; a lone session is a batch of one.

:func:`deliver_many` (a host's kick loop, a due wake's sessions) and :func:`deliver` (one
session: ``Bus.deliver_session``, a Celery task) run the same stages, top to bottom in
:func:`run_once`, each one round trip for the whole batch where it can be:

1. **begin** (:func:`_begin`): every session's lock, dispatch flag and first read
   (``delivery_begin.lua`` each; a session with nothing to read has its snapshot in the
   same call). A session whose lock is held elsewhere is ``busy`` (the hand-off, below).
   A raw line a killed worker left in flight is settled here, and its queue read again.
2. **take** (:func:`_take`): each read's entries into the inbox
   (:meth:`bus.delivery.inbox.Inbox.ingest`, every session's writes on one pipeline behind
   the fence), or written raw, one line a message (:func:`bus.delivery.take.take_raw`:
   the inbox off, or the session closing).
3. **snapshot** (:func:`_snapshot`): behind those writes in the same round trip, the fence
   again, the cursor's move, the plan's reads and the next entries; a running session's
   steer taken into flight in the same call where the reads show the steer rule
   (:func:`bus.core.policy.steers`). A session that read more (more entries than one read,
   or sent while it ran) goes round take and snapshot again.
4. **plan** (:func:`_plan`): what an earlier run left settled first (a notice left in
   flight, unconfirmed floor notices, a drain's marks waiting on the floor, a wake whose
   command never ran), then the pure :func:`bus.core.policy.decide` per session, acted
   on: a wake or a flush put on the schedule, a notice or a wake for the next stage, a
   wake for notices the floor still holds, a closing session's inbox written raw.
5. **notice** (:func:`_notice`): the notices (:meth:`bus.delivery.notice.Notices.send`:
   taken, written one by one, their records with their unlocks; a wake's command run).
6. **finish** (:func:`_finish`): the other unlocks, each with its hand-off flag.

Each session keeps its own lock and lease (renewed for the whole batch by one thread,
:mod:`bus.delivery.renewer`), one notice per run, marks only on confirmation.

The lock hand-off: deliveries of one session are serialised by its lock. A delivery that
finds the lock held (a send arrived after the holder cleared the dispatch flag) does not
sleep and retry, which would keep a message waiting behind a delivery that had already
finished: it sets ``P:{sid}:again`` and tries the lock once more; if that fails too it
returns at once (``busy``). Every delivery takes the flag with its unlock and runs again
if it was set. No hand-off is lost: the flag is set before the second try, so a holder
that unlocks after that try fails sees the flag. A holder that dies with the flag set
would leave the work to the scheduler's sweep; so a hand-off also puts a ``lease`` kick
on the schedule for when the holder's lease runs out: a dead holder's session is taken
over then (within ``INBOX_LOCK_TTL_S``), and for a live holder it is one empty delivery.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bus.core import policy
from bus.core.clock import Clock
from bus.core.models import SessionInfo, check_session_id, now_ms
from bus.store.delivery import DeliverySnapshot, DeliveryStart

from .drain_marks import PENDING_MARKS
from .lease import Lease
from .notice import Finisher, NoticeJob, Notices, new_notice_id
from .renewer import renewer_for
from .report import DeliveryReport
from .run import Run, fence, give_back, left_over, steer_likely
from .take import BATCH, inbox_entries, raw_mode, recover_raw, take_raw

if TYPE_CHECKING:
    from bus.store.store import Store
    from bus.telemetry.metrics import Metrics

    from .floor import Floor
    from .host import DeliveryHost
    from .inbox import Inbox
    from .raw_lines import RawLines

# Sessions per step: a step's pipeline stays short, and its fences fresh (bus.delivery.lease).
CHUNK = 64


# A run whose report asks for another run: busy (its lease lost or the lock held
# elsewhere), or handed work (``again``). Runs in a row for one session before the rest is
# dispatched as a fresh task, so one busy session cannot hold a worker child forever
# while others wait.
MAX_RUNS = 20
# After the holder's lease would have run out: a little past it, so the kick finds it free.
LEASE_SLACK_MS = 100


def deliver(bus: DeliveryHost, sid: str) -> DeliveryReport:
    """Deliver ``sid``'s queue (a batch of one); ``busy`` only when the work was handed to
    a running holder."""
    return deliver_many(bus, [sid])[0]


def deliver_many(
    bus: DeliveryHost,
    sids: list[str],
    progress: Callable[[], object] | None = None,
    defer: Finisher | None = None,
) -> list[DeliveryReport]:
    """Deliver each of ``sids``, a chunk at a time; one report per distinct session,
    ``busy`` only for one whose work was handed to a running holder. Counters go in one
    round trip (``Metrics.batched``). ``progress`` is called after each chunk, each read
    taken after the first and each session run again on its own: a long batch still
    shows its worker's supervisor that it moves (bus.ops.supervise).
    ``defer``: sends the first runs' heard steers' records
    (:meth:`bus.delivery.notice.Notices.send`); a session run again sends its own."""
    tick = progress or (lambda: None)
    sids = list(dict.fromkeys(sids))
    for sid in sids:
        check_session_id(sid)
    out: list[DeliveryReport] = []
    with bus.metrics.batched():
        for i in range(0, len(sids), CHUNK):
            for report in run_once(bus, sids[i : i + CHUNK], tick, defer):
                out.append(_hand_off(bus, report, tick) if report.busy or report.again else report)
            tick()
    return out


def _hand_off(
    bus: DeliveryHost, first: DeliveryReport, tick: Callable[[], object]
) -> DeliveryReport:
    """Run ``first``'s session again while its runs ask for it (the hand-off flag), up to
    :data:`MAX_RUNS`; a busy one asks the holder to run again (see the module's docstring)."""
    store, sid = bus.store, first.session
    total = DeliveryReport(session=sid)
    add_report(total, first)
    report, runs = first, 1
    while True:
        if report.busy:
            store.delivery.ask_again(sid, store.lock_ttl_ms)
            report = _once(bus, sid, total, tick)
            if report.busy:
                total.busy = True  # the holder runs again after it unlocks
                store.schedule.schedule("lease", sid, now_ms() + store.lock_ttl_ms + LEASE_SLACK_MS)
                return total
        if not report.again:
            return total
        if runs >= MAX_RUNS:
            break
        report, runs = _once(bus, sid, total, tick), runs + 1
    if store.queue.mark_pending(sid):
        info = store.sessions.get_session(sid)
        if info is not None:
            bus.dispatcher.request(info.host, sid)
    return total


def _once(
    bus: DeliveryHost, sid: str, total: DeliveryReport, tick: Callable[[], object]
) -> DeliveryReport:
    [report] = run_once(bus, [sid], tick)
    add_report(total, report)
    tick()
    return report


def add_report(total: DeliveryReport, report: DeliveryReport) -> None:
    """Add what ``report``'s run did to ``total``."""
    for name in ("raw", "socket", "file", "skipped", "inbox"):
        setattr(total, name, getattr(total, name) + getattr(report, name))
    total.notices.extend(report.notices)
    total.errors.extend(report.errors)


def run_once(
    bus: DeliveryHost,
    sids: list[str],
    tick: Callable[[], object] = lambda: None,
    defer: Finisher | None = None,
) -> list[DeliveryReport]:
    """One run of each of ``sids`` (distinct) through the stages. Each report says whether
    its session must run again: ``busy`` (the lock held elsewhere, or its lease lost) or
    ``again`` (handed work, or sent more while it ran)."""
    store, floor, clock = bus.store, bus.floor, bus.clock
    inbox_default = bus.settings.agent_inbox
    reports = {sid: DeliveryReport(session=sid) for sid in sids}
    runs = _begin(store, floor, clock, sids, reports)
    if runs:
        renewer = renewer_for(store)
        handle = renewer.add(runs)
        try:
            live = [r for r in runs if not r.done]
            # Take and snapshot while a run has a read to take (or no snapshot yet).
            while any(r.rows or r.snap is None for r in live):
                pipe = _take(store, bus.inbox, bus.raw, inbox_default, live)
                live = _snapshot(store, floor, clock, inbox_default, pipe, live)
                if any(r.rows for r in live) and len(sids) > 1:
                    tick()
            _counted(store, bus.metrics, bus.settings.stream_keep, live)
            noticing = _plan(store, bus.inbox, bus.notices, floor, clock, live)
            _notice(bus.notices, clock, noticing, defer)
            _finish(store, live)
        finally:
            renewer.remove(handle)
            for run in runs:
                if not run.done:  # an error on the way: each lock freed on its own
                    run.lease.release()
                    run.done = True
        for run in runs:
            run.report.again = run.rerun and not run.report.busy
    return [reports[sid] for sid in sids]


# -- 1. begin ----------------------------------------------------------------------------


def _begin(
    store: Store, floor: Floor, clock: Clock, sids: list[str], reports: dict[str, DeliveryReport]
) -> list[Run]:
    """Every session's start in one round trip; a run for each whose lock was taken (the
    others are ``busy``). A raw line left in flight is settled first (its line looked for
    on the floor) and the queue read again after it: one session's rare round trips."""
    runs: list[Run] = []
    for sid, start in zip(sids, store.delivery.begin_many(sids, BATCH, snapshot=True), strict=True):
        if start is None:
            reports[sid].busy = True  # held elsewhere: the hand-off does the rest
            continue
        # Renewed with the others' by the process's renewer (bus.delivery.renewer).
        lease = Lease.adopt(store, sid, start.token, start.sent_at, renew=False)
        run = _started(store, floor, sid, start, lease, reports[sid])
        if run.snap is not None and not lease.confirmed(run.snap.held, run.snap.sent_at):
            run.drop(store, clock)
        runs.append(run)
    return runs


def _started(
    store: Store,
    floor: Floor,
    sid: str,
    start: DeliveryStart,
    lease: Lease,
    report: DeliveryReport,
) -> Run:
    if start.rows is not None:
        run = Run(sid, lease, report, start.info, start.rows, start.answers)
        run.snap = start.snapshot  # nothing read: the plan's reads came with the start
        return run
    # A raw line was in flight: nothing was read.
    recover_raw(store, floor, sid, report, start.rawflight)
    rows = store.queue.read_after(sid, store.queue.cursor(sid), BATCH)
    return Run(sid, lease, report, store.sessions.get_session(sid) if rows else None, rows, None)


# -- 2. take -----------------------------------------------------------------------------


def _take(
    store: Store, inbox: Inbox, raw_lines: RawLines, inbox_default: bool, runs: list[Run]
) -> Any:
    """Each run's read taken: into the inbox, every session's writes queued on one
    pipeline (sent with the snapshots), behind the fence; or written raw, one line a
    message. A run whose lease is lost takes nothing (its cursor stays). The pipeline."""
    pipe = store.pipeline()
    taking = [r for r in runs if r.rows]
    for run in taking:
        if run.answers is None:  # a later read: its send answers read now
            msgs = [json.loads(fields["m"]) for _eid, fields in run.rows]
            run.answers = store.queue.first_answers(run.sid, [m["id"] for m in msgs])
    raw = [r for r in taking if raw_mode(r.info, inbox_default)]
    handles: dict[str, str | None] = {}
    for run in fence(store, [r for r in taking if r not in raw]):
        facts: list[str] = []
        assert run.answers is not None
        batch, raws = inbox_entries(run.rows, run.answers, run.report, facts=facts)
        inbox.ingest(
            run.sid,
            batch,
            run.info,
            run.report,
            pipe=pipe,
            handles=handles,
            raws=raws,
            wholes=run.wholes,
            facts=facts,
        )
    for run in raw:
        assert run.answers is not None
        take_raw(store, raw_lines, run.lease, run.rows, run.answers, run.report)
    return pipe


# -- 3. snapshot -------------------------------------------------------------------------


def _snapshot(
    store: Store, floor: Floor, clock: Clock, inbox_default: bool, pipe: Any, runs: list[Run]
) -> list[Run]:
    """Behind the take's writes, in the same round trip: each run's fence, its cursor's
    move past what it took, the plan's reads and the next read. The runs still holding
    their leases, each with its snapshot and its next read (``rows``)."""
    live = []
    for run in runs:
        if run.lease.lost:
            run.drop(store, clock)
        else:
            live.append(run)
    # A run that read nothing has its snapshot from its start (a due wake: one call).
    later = [r for r in live if r.rows or r.snap is None]
    items = [(r.sid, r.lease.token, r.rows[-1][0] if r.rows else None) for r in later]
    # A running session's steer is likely the plan: its notice is taken into flight in
    # the snapshot's own call when the reads show it (one round trip less a lone send).
    for run in later:
        likely = steer_likely(floor, inbox_default, run.sid, run.info)
        run.take_nid = new_notice_id() if likely else None
    got = (
        store.delivery.snapshot_many_after(
            pipe,
            items,
            BATCH,
            takes=[r.take_nid for r in later],
            now=clock.now_ms(),
            inbox_default=inbox_default,
        )
        if later
        else []
    )
    kept = [r for r in live if r not in later]  # their snapshots came with their starts
    for run, snap in zip(later, got, strict=True):
        run.snap = snap
        if not run.lease.confirmed(snap.held, snap.sent_at):
            run.drop(store, clock)
            continue
        # The next read (none taken with a steer: parts/snapshot.lua), taken as the first
        # was; the plan is made from the snapshot after the last.
        run.rows, run.answers, run.info = snap.rows, None, snap.info
        if snap.rows:
            run.snap = None
        kept.append(run)
    return kept


def _counted(store: Store, metrics: Metrics, keep: int, runs: list[Run]) -> None:
    """The messages each run took, counted; its queue's trim floor set (its last
    snapshot's length)."""
    for run in runs:
        taken = run.report.inbox + run.report.raw
        if taken:
            metrics.incr("messages_in", taken)
        assert run.snap is not None
        store.queue.set_trim_floor(run.sid, keep, run.snap.stream_len)


# -- 4. plan -----------------------------------------------------------------------------


def _plan(
    store: Store, inbox: Inbox, notices: Notices, floor: Floor, clock: Clock, runs: list[Run]
) -> list[Run]:
    """Each run's plan (the pure :func:`bus.core.policy.decide`) from its snapshot, what an
    earlier run left settled first (:func:`_settled`), and acted on: a wake or a flush put
    on the schedule (one round trip for all), a notice or a wake left for the notice
    stage, a wake for notices the floor still holds, or what waits in a closing session's
    inbox written raw. The runs that send a notice, their leases fenced."""
    due: list[tuple[str, int]] = []
    noticing: list[Run] = []
    for run in runs:
        snap = run.snap
        assert snap is not None
        info = snap.info
        if info is None:  # the session is gone
            give_back(store, clock, run)
            continue
        view = _settled(inbox, notices, floor, run, info, snap)
        plan = run.plan = inbox.decide(view)
        if plan.action != "notice":
            give_back(store, clock, run)  # taken for a steer the plan did not make
        if plan.action == "schedule" and plan.at is not None:
            due.append((run.sid, plan.at))
        elif plan.action in ("notice", "wake"):
            noticing.append(run)
        elif plan.action == "wake_floor" and run.lease.held(fresh=True):
            notices.wake_for_floor(run.sid, plan.reason, info)
        elif plan.action == "raw" and view.pending:
            inbox.pending_raw(run.sid, run.report)
    store.schedule.schedule_many("due", due)
    fenced = fence(store, noticing)
    for run in noticing:
        if run not in fenced:
            give_back(store, clock, run)  # its lease lost: it sends nothing
    return fenced


def _settled(
    inbox: Inbox,
    notices: Notices,
    floor: Floor,
    run: Run,
    info: SessionInfo,
    snap: DeliverySnapshot,
) -> policy.InboxView:
    """The plan's view, once what an earlier run left (:func:`left_over`) is settled: a
    notice left in flight recovered (on the floor: written; else its messages new again),
    a wake's command that never ran run now (the lease still ours), a drain's marks
    recorded, the floor's unconfirmed notices swept (a dead drainer's given back). The
    snapshot's view stands unless one of those changed the inbox; then it is read again."""
    sid = run.sid
    marks = (floor.session_dir(sid) / PENDING_MARKS).exists()
    if not left_over(info, snap.notice_id, snap.floor_ids, marks):
        return inbox.view_of(info, snap.view)
    changed = notices.recover(sid, snap.notice_id)
    if info.wake_pending and run.lease.held(fresh=True):
        notices.finish_wake(sid, info.wake_pending, info)
    if marks:
        inbox.on_drain(sid, [])  # marks a drain made while Redis was down
        changed = True
    if snap.floor_ids:
        inbox.sweep_floor(sid, nids=snap.floor_ids)
        changed = True
    return inbox.view(sid, info) if changed else inbox.view_of(info, snap.view)


# -- 5. notice ---------------------------------------------------------------------------


def _notice(
    notices: Notices,
    clock: Clock,
    runs: list[Run],
    defer: Finisher | None = None,
) -> None:
    """The runs' notices and wakes, each freeing its lock and taking its hand-off flag in
    its last call (:meth:`bus.delivery.notice.Notices.send`; a wake whose command runs
    keeps its lock until the command was started, and is unlocked by the finish stage).
    A lease lost before the write leaves its notice in flight, for the next holder to put
    back (:meth:`bus.delivery.notice.Notices.recover`), as after a crash."""
    jobs = []
    for run in runs:
        assert run.plan is not None and run.snap is not None
        taken = run.snap.taken
        jobs.append(
            NoticeJob(
                run.sid,
                run.plan.action == "wake",
                run.plan.reason,
                run.snap.info,
                lease=run.lease,
                unlock=True,
                wholes=run.wholes,
                taken=(run.take_nid, taken) if run.take_nid and taken else None,
            )
        )
    notices.send(jobs, defer)
    for run, job in zip(runs, jobs, strict=True):
        if job.notice is not None:
            run.report.notices.append(job.notice)
        if job.error is not None:
            (run.report.repeated if job.repeated else run.report.errors).append(job.error)
        if job.unlocked:
            run.done = True
            # Sent more meanwhile, or the lock no longer ours (lost on the way): as after
            # an unlock (_finish), it runs again.
            run.rerun = run.rerun or job.again or not job.freed


# -- 6. finish ---------------------------------------------------------------------------


def _finish(store: Store, runs: list[Run]) -> None:
    """The unlocks with the hand-off flags, in one round trip (a run that wrote a notice
    was unlocked in its notice's last call)."""
    ending = [r for r in runs if not r.done]
    for run in ending:
        run.lease.stop_renewing()
    agains = store.delivery.unlock_many([(r.sid, r.lease.token) for r in ending])
    for run, again in zip(ending, agains, strict=True):
        run.done = True
        # Lost on the way (a notice left in flight): as a lease lost, it runs again.
        run.rerun = run.rerun or again or run.lease.lost


__all__ = [
    "CHUNK",
    "MAX_RUNS",
    "DeliveryReport",
    "add_report",
    "deliver",
    "deliver_many",
    "left_over",
    "run_once",
    "steer_likely",
]
