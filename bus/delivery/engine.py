"""The one delivery engine: sessions delivered as a batch; a lone session is a batch of one.

:func:`deliver_many` (a host's kick loop, a due wake's sessions) and :func:`deliver` (one
session: ``Bus.deliver_session``, a Celery task) run the same steps, each one round trip
for the whole batch: the starts (``delivery_begin.lua`` each: the lock, the dispatch flag,
the first read), the messages taken into the inboxes (:meth:`bus.delivery.inbox.Inbox.ingest`)
with the snapshots and their fences behind them (a session with nothing to read: its
snapshot in its start's call), the schedule, the notices (:meth:`bus.delivery.notice.Notices.send`:
taken, written one by one, their records with their unlocks), the other unlocks. The plan
is the pure :func:`bus.core.policy.decide` per session; each session keeps its own lock
and lease, one notice per run, marks only on confirmation.

The rarer shapes run the general loop from where they stand
(:mod:`bus.delivery.queue_run`: a raw line in flight or raw mode, more entries than one
read) or the inbox's whole plan (:meth:`~bus.delivery.inbox.Inbox.after_delivery`: a notice
left in flight, unconfirmed floor notices, drain marks waiting on the floor, a wake
command, a plan other than schedule/notice/wake).

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

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bus.core import policy
from bus.core.models import SessionInfo, check_session_id, now_ms
from bus.store.delivery import DeliverySnapshot, DeliveryStart

from .fast_drain import PENDING_MARKS
from .lease import Lease
from .notice import Finisher, NoticeJob, new_notice_id
from .queue_run import (
    BATCH,
    DeliveryHost,
    continue_after,
    continue_delivery,
    inbox_entries,
    raw_mode,
)
from .renewer import renewer_for
from .report import DeliveryReport

log = logging.getLogger(__name__)

# Sessions per step: a step's pipeline stays short, and its fences fresh (bus.delivery.lease).
CHUNK = 64


def takes_batch(start: DeliveryStart, raw: bool) -> bool:
    """Whether a started delivery goes the batched way: no raw line in flight, and its
    entries (if any) go into the inbox, not raw."""
    return start.rows is not None and (not start.rows or not raw)


def after_step(
    info: SessionInfo | None,
    notice_id: str | None,
    floor_ids: list[str],
    marks_waiting: bool,
    action: str,
) -> str:
    """What the batch does after a session's snapshot: ``schedule``, ``notice`` (a notice
    or a wake in the batch), ``none``, or ``one`` (the one-session code,
    :meth:`~bus.delivery.inbox.Inbox.after_delivery`, for a recovery, a floor sweep or a rarer
    plan). A wake with a command to run is ``one`` too (the command runs between writes)."""
    if info is None:
        return "none"
    if notice_id is not None or floor_ids or marks_waiting or info.wake_pending:
        return "one"
    if action == "schedule":
        return "schedule"
    if action == "notice" or (action == "wake" and not info.wake_cmd):
        return "notice"
    if action in ("wait", "nothing"):
        return "none"
    return "one"


# A run whose report asks for another run: busy (its lease lost or the lock held
# elsewhere), or handed work (``again``). Runs in a row for one session before the rest is
# dispatched as a fresh task, so one busy session cannot hold a worker child forever
# while others wait.
MAX_RUNS = 20
# After the holder's lease would have run out: a little past it, so the kick finds it free.
LEASE_SLACK_MS = 100


@dataclass
class _Run:
    sid: str
    start: DeliveryStart
    lease: Lease
    report: DeliveryReport
    snap: DeliverySnapshot | None = None
    plan: policy.Plan | None = None
    done: bool = False  # its lease released (or handed to the general loop)
    rerun: bool = False
    # Its records as kept -> whole, as ingested (the notice reads them back unrestored).
    wholes: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The notice id its snapshot may take into flight (a running session's steer).
    take_nid: str | None = None


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
    round trip (``Metrics.batched``). ``progress`` is called after each chunk and each
    session run again on its own: a long batch (after a worker died, many take the
    general way) still shows its worker's supervisor that it moves (bus.ops.supervise).
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
            store.ask_again(sid, store.lock_ttl_ms)
            report = _once(bus, sid, total, tick)
            if report.busy:
                total.busy = True  # the holder runs again after it unlocks
                store.schedule("lease", sid, now_ms() + store.lock_ttl_ms + LEASE_SLACK_MS)
                return total
        if not report.again:
            return total
        if runs >= MAX_RUNS:
            break
        report, runs = _once(bus, sid, total, tick), runs + 1
    if store.mark_pending(sid):
        info = store.get_session(sid)
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
    """One run of each of ``sids`` (distinct), the starts in one round trip: the batched
    steps for the common shape, the general loop for the rest. Each report says whether
    its session must run again: ``busy`` (the lock held elsewhere, or its lease lost) or
    ``again`` (handed work, or sent more while it ran)."""
    store = bus.store
    reports = {sid: DeliveryReport(session=sid) for sid in sids}
    runs: list[_Run] = []
    for sid, start in zip(sids, store.begin_many(sids, BATCH, snapshot=True), strict=True):
        if start is None:
            reports[sid].busy = True  # held elsewhere: the hand-off does the rest
            continue
        if takes_batch(start, bool(start.rows) and raw_mode(bus, start.info)):
            # Renewed with the others' by the process's renewer (bus.delivery.renewer).
            lease = Lease.adopt(store, sid, start.token, start.sent_at, renew=False)
            runs.append(_Run(sid, start, lease, reports[sid]))
            continue
        report = continue_delivery(bus, sid, start)
        if len(sids) > 1:
            tick()
        report.again = report.again if report.again is not None else store.take_again(sid)
        reports[sid] = report
    if runs:
        renewer = renewer_for(store)
        handle = renewer.add(runs)
        try:
            _run_batch(bus, runs, defer)
        finally:
            renewer.remove(handle)
            for run in runs:
                if not run.done:  # an error on the way: each lock freed on its own
                    run.lease.release()
                    run.done = True
        for run in runs:
            run.report.again = run.rerun and not run.report.busy
    return [reports[sid] for sid in sids]


def _fence(bus: DeliveryHost, runs: list[_Run]) -> list[_Run]:
    """The runs whose leases still stand: fresh ones as they are, the others checked in
    one round trip (as :meth:`~bus.delivery.lease.Lease.held`, for all of them at once)."""
    stale = [r for r in runs if not r.lease.fresh()]
    if stale:
        sent_at = time.monotonic()
        answers = bus.store.extend_many([(r.sid, r.lease.token) for r in stale])
        for run, ok in zip(stale, answers, strict=True):
            run.lease.confirmed(ok, sent_at)
    return [r for r in runs if not r.lease.lost]


def _run_batch(bus: DeliveryHost, runs: list[_Run], defer: Finisher | None = None) -> None:
    if not runs:
        return
    store = bus.store
    # The messages into the inboxes, every session's in one pipeline, behind the fence;
    # then the fence again, the cursor's move, the plan's reads and what came since, in
    # the same round trip (the snapshots read what the writes left).
    taking = [r for r in runs if r.start.rows]
    pipe = store.pipeline()
    handles: dict[str, str | None] = {}
    for run in _fence(bus, taking):
        facts: list[str] = []
        batch, raws = inbox_entries(
            run.start.rows or [], run.start.answers, run.report, facts=facts
        )
        bus.inbox.ingest(
            run.sid,
            batch,
            run.start.info,
            run.report,
            pipe=pipe,
            handles=handles,
            raws=raws,
            wholes=run.wholes,
            facts=facts,
        )
    # A lease lost at the fence took nothing: the cursor stays. Its begin cleared the
    # dispatch flag and the lock may have lapsed with nobody taking it: the session runs
    # again after the batch (the hand-off: delivered, or handed to a holder), not left to
    # the sweep. (One lost after the fence: its snapshot says so, below.)
    live = []
    for run in runs:
        if run.lease.lost:
            run.report.busy = True
            run.lease.release()
            run.done = run.rerun = True
        else:
            live.append(run)
    # A run that read nothing has its snapshot from its start (a due wake: one call).
    later = [r for r in live if r.start.snapshot is None]
    items = [(r.sid, r.lease.token, r.start.rows[-1][0] if r.start.rows else None) for r in later]
    # A running session's steer is likely the plan: its notice is taken into flight in
    # the snapshot's own call when the reads show it (one round trip less a lone send).
    for run in later:
        run.take_nid = new_notice_id() if steer_likely(bus, run.sid, run.start.info) else None
    # (None later: nothing was read, so nothing was queued on the pipeline either.)
    got = (
        store.snapshot_many_after(
            pipe,
            items,
            BATCH,
            takes=[r.take_nid for r in later],
            now=bus.inbox.notices.clock.now_ms(),
            inbox_default=bus.settings.agent_inbox,
        )
        if later
        else []
    )
    snaps = dict(zip((id(r) for r in later), got, strict=True))
    planned = []
    for run in live:
        snap = run.start.snapshot or snaps[id(run)]
        run.snap = snap
        if not run.lease.confirmed(snap.held, snap.sent_at):
            _give_back(bus, run)
            run.report.busy = True
            run.lease.release()
            run.done = run.rerun = True  # as above: runs again after the batch
            continue
        if run.report.inbox:
            bus.metrics.incr("messages_in", run.report.inbox)
        planned.append(run)
    for run in planned:
        assert run.snap is not None
        store.set_trim_floor(run.sid, bus.settings.stream_keep, run.snap.stream_len)
    _plan_and_notice(bus, planned, defer)
    # The unlocks with the hand-off flags, in one round trip (a run that wrote a notice
    # was unlocked in its notice's last call: _notices).
    ending = [r for r in planned if not r.done]
    for run in ending:
        run.lease.stop_renewing()
    agains = store.unlock_many([(r.sid, r.lease.token) for r in ending])
    for run, again in zip(ending, agains, strict=True):
        run.done = True
        # Lost on the way (a notice left in flight): as above, it runs again.
        run.rerun = run.rerun or again or run.lease.lost


def _plan_and_notice(bus: DeliveryHost, runs: list[_Run], defer: Finisher | None = None) -> None:
    due: list[tuple[str, int]] = []
    noticing: list[_Run] = []
    for run in runs:
        snap = run.snap
        assert snap is not None
        if snap.rows:
            # More to read (sent while this ran, or past the first read): the general
            # loop takes the rest, its plan after it, and frees the lock.
            more = continue_after(bus, run.sid, run.lease, snap)
            run.done = True
            add_report(run.report, more)
            run.report.busy = more.busy
            run.rerun = bool(
                more.again if more.again is not None else bus.store.take_again(run.sid)
            )
            continue
        info = snap.info
        marks = info is not None and (bus.floor.session_dir(run.sid) / PENDING_MARKS).exists()
        plan = None
        if info is not None:
            plan = bus.inbox.decide(bus.inbox.view_of(info, snap.view))
        step = after_step(
            info, snap.notice_id, snap.floor_ids, marks, plan.action if plan else "wait"
        )
        run.plan = plan
        if step != "notice" or plan is None or plan.action != "notice":
            _give_back(bus, run)  # taken for a steer the plan did not make
        if step == "schedule" and plan is not None and plan.at is not None:
            due.append((run.sid, plan.at))
        elif step == "notice":
            noticing.append(run)
        elif step == "one":
            run.report.lease = run.lease
            bus.inbox.after_delivery(run.sid, run.report, snap)
            run.report.lease = None
    bus.store.schedule_many("due", due)
    fenced = _fence(bus, noticing)
    kept = {id(r) for r in fenced}
    for run in noticing:
        if id(run) not in kept:
            _give_back(bus, run)  # its lease lost: it sends nothing
    _notices(bus, fenced, defer)


def _notices(bus: DeliveryHost, runs: list[_Run], defer: Finisher | None = None) -> None:
    """The runs' notices (no wake command among them), each freeing its lock and taking
    its hand-off flag in its last call (:meth:`bus.delivery.notice.Notices.send`). A
    lease lost before the write leaves its notice in flight, for the next holder to put
    back (:meth:`bus.delivery.notice.Notices.recover`), as after a crash."""
    jobs = []
    for run in runs:
        assert run.plan is not None
        snap = run.snap
        taken = snap.taken if snap is not None else None
        jobs.append(
            NoticeJob(
                run.sid,
                run.plan.action == "wake",
                run.plan.reason,
                snap.info if snap is not None else None,
                lease=run.lease,
                unlock=True,
                wholes=run.wholes,
                taken=(run.take_nid, taken) if run.take_nid and taken else None,
            )
        )
    bus.inbox.notices.send(jobs, defer)
    for run, job in zip(runs, jobs, strict=True):
        if job.notice is not None:
            run.report.notices.append(job.notice)
        if job.error is not None:
            (run.report.repeated if job.repeated else run.report.errors).append(job.error)
        if job.unlocked:
            run.done = True
            # Sent more meanwhile, or the lock no longer ours (lost on the way): as after
            # an unlock (_run_batch), it runs again.
            run.rerun = run.rerun or job.again or not job.freed


def steer_likely(bus: DeliveryHost, sid: str, info: SessionInfo | None) -> bool:
    """Whether a batched run's plan is likely a running session's steer: the steer rule
    (:func:`bus.core.policy.steers`) on its record as its start read it, with no drain's
    marks waiting on this host's floor (those take the one-session way). Its notice is
    then taken in the snapshot's call where the snapshot's reads hold the rule too
    (``steer_ready`` in parts/snapshot.lua)."""
    if info is None or raw_mode(bus, info):  # no session, or its inbox off
        return False
    facts = policy.SteerFacts(
        state=info.state,
        agent_inbox=True,
        prompt_waiting=info.prompt_waiting,
        wake_pending=bool(info.wake_pending),
        in_flight=False,  # read by the snapshot itself
        unconfirmed=False,
        retry_at=None,
        now_ms=0,
    )
    return policy.steers(facts) and not (bus.floor.session_dir(sid) / PENDING_MARKS).exists()


def _give_back(bus: DeliveryHost, run: _Run) -> None:
    """A notice the run's snapshot took into flight for a steer that is not sent in this
    batch (the plan differs, or the lease was lost): its messages back to new."""
    snap = run.snap
    if snap is None or snap.taken is None or run.take_nid is None:
        return
    bus.store.revert_notice(
        run.sid, run.take_nid, bus.inbox.notices.clock.now_ms(), "the plan sent no steer"
    )
    snap.taken = None


__all__ = [
    "CHUNK",
    "MAX_RUNS",
    "DeliveryReport",
    "add_report",
    "after_step",
    "deliver",
    "deliver_many",
    "run_once",
    "steer_likely",
    "takes_batch",
]
