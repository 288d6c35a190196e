"""Many sessions' deliveries at once, in a few round trips for the lot (due wakes).

One delivery of an idle session makes ~5-7 round trips (bus.delivery.engine): a wake due for
500 sessions was 2,500-3,500 round trips, each a context switch on a small box, and the
arrivals that planned those wakes as many again. :func:`deliver_many` runs the same steps
for many sessions side by side, each step one pipeline for all of them: the starts
(``delivery_begin.lua`` each), the messages taken into the inboxes, the snapshots with
their fences (a session with nothing to read: its snapshot in its start's call), the
schedule, the notices taken, the notices' records with their unlocks, the other unlocks. The
plan is the same pure :func:`bus.core.policy.decide` per session; each session keeps its own
lock and lease, one notice per batch, marks only on confirmation.

Only the common shape goes this way: a session with a raw line in flight or in raw mode,
a notice left in flight, unconfirmed floor notices, drain marks waiting on the floor, a
wake command, or a plan other than schedule/notice/wake runs the one-session code from
where it stands (:func:`bus.delivery.engine.continue_delivery`, :meth:`bus.delivery.inbox.Inbox.notice`,
:meth:`~bus.delivery.inbox.Inbox.after_delivery`). A session held by another delivery, asked to
run again, or sent more while its batch ran, goes through :func:`bus.delivery.lock_handoff.deliver`
afterwards.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis

from bus.core import faults, notices, policy
from bus.core.models import SessionInfo, check_session_id
from bus.store import packing
from bus.store.delivery import DeliverySnapshot, DeliveryStart, taken_records

from .engine import BATCH, DeliveryHost, continue_delivery, raw_mode
from .fast_drain import PENDING_MARKS
from .lease import Lease
from .lock_handoff import add_report
from .lock_handoff import deliver as deliver_one
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


@dataclass
class _Run:
    sid: str
    start: DeliveryStart
    lease: Lease
    report: DeliveryReport
    snap: DeliverySnapshot | None = None
    plan: policy.Plan | None = None
    done: bool = False  # its lease released (or handed to the one-session code)
    rerun: bool = False
    took: list[Any] = field(default_factory=list)
    # Its records as kept -> whole, as ingested (the notice reads them back unrestored).
    wholes: dict[str, dict[str, Any]] = field(default_factory=dict)


def deliver_many(
    bus: DeliveryHost, sids: list[str], progress: Callable[[], object] | None = None
) -> list[DeliveryReport]:
    """Deliver each of ``sids`` (as :func:`bus.delivery.lock_handoff.deliver`), a chunk at a time; one
    report per distinct session. Counters go in one round trip (``Metrics.batched``).
    ``progress`` is called after each chunk and each session delivered on its own: a
    long batch (after a worker died, many take the one-session way) still shows its
    worker's supervisor that it moves (bus.ops.supervise)."""
    tick = progress or (lambda: None)
    sids = list(dict.fromkeys(sids))
    for sid in sids:
        check_session_id(sid)
    out: list[DeliveryReport] = []
    with bus.metrics.batched():
        for i in range(0, len(sids), CHUNK):
            out.extend(_chunk(bus, sids[i : i + CHUNK], tick))
            tick()
    return out


def _chunk(bus: DeliveryHost, sids: list[str], tick: Callable[[], object]) -> list[DeliveryReport]:
    store = bus.store
    reports = {sid: DeliveryReport(session=sid) for sid in sids}
    later: list[str] = []
    runs: list[_Run] = []
    for sid, start in zip(sids, store.begin_many(sids, BATCH, snapshot=True), strict=True):
        if start is None:
            later.append(
                sid
            )  # held elsewhere: the hand-off (bus.delivery.lock_handoff) does the rest
            continue
        if takes_batch(start, bool(start.rows) and raw_mode(bus, start.info)):
            # Renewed with the others' by one thread (_renew), not a thread each.
            lease = Lease.adopt(store, sid, start.token, start.sent_at, renew=False)
            runs.append(_Run(sid, start, lease, reports[sid]))
            continue
        report = continue_delivery(bus, sid, start)
        tick()
        reports[sid] = report
        again = report.again if report.again is not None else store.take_again(sid)
        if again or report.busy:  # busy: its lease lost, its begin cleared the flag
            later.append(sid)
    stop = threading.Event()
    renewer = threading.Thread(
        target=_renew, args=(store, runs, stop), name="batch-leases", daemon=True
    )
    renewer.start()
    try:
        _run_batch(bus, runs)
    finally:
        stop.set()
        for run in runs:
            if not run.done:  # an error on the way: each lock freed on its own
                run.lease.release()
                run.done = True
    for run in runs:
        if run.rerun:
            later.append(run.sid)
    for sid in later:
        more = deliver_one(bus, sid)
        tick()
        add_report(reports[sid], more)
        reports[sid].busy = more.busy
    return [reports[sid] for sid in sids]


def _renew(store: Any, runs: list[_Run], stop: threading.Event) -> None:
    """Extend the batch's leases every third of their TTL while it runs, in one round
    trip for all (as each :class:`~bus.delivery.lease.Lease` renews its own); a lease found held
    by another is lost (its run writes nothing more); a Redis blip is retried, the
    fences before each write decide."""
    interval = max(0.05, store.lock_ttl_ms / 3000)
    while not stop.wait(interval):
        live = [r for r in runs if not r.done and not r.lease.lost]
        if not live:
            return
        sent_at = time.monotonic()
        try:
            answers = store.extend_many([(r.sid, r.lease.token) for r in live])
        except redis.RedisError as exc:
            log.info("batch lease renewal failed (%s); trying again", exc)
            continue
        for run, ok in zip(live, answers, strict=True):
            if not run.done:
                run.lease.confirmed(ok, sent_at)


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


def _run_batch(bus: DeliveryHost, runs: list[_Run]) -> None:
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
        rows = run.start.rows or []
        batch, raws = [], []
        for (eid, fields), answer in zip(rows, run.start.answers, strict=True):
            if (answer or {}).get("state") == "withdrawn":
                run.report.skipped += 1
            else:
                batch.append((json.loads(fields["m"]), int(eid.split("-")[0])))
                raws.append(fields["m"])
        bus.inbox.ingest(
            run.sid,
            batch,
            run.start.info,
            run.report,
            pipe=pipe,
            handles=handles,
            raws=raws,
            wholes=run.wholes,
        )
    # A lease lost at the fence took nothing: the cursor stays. Its begin cleared the
    # dispatch flag and the lock may have lapsed with nobody taking it: the session runs
    # again after the batch (bus.delivery.lock_handoff: delivered, or handed to a holder), not left to
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
    # (None later: nothing was read, so nothing was queued on the pipeline either.)
    got = store.snapshot_many_after(pipe, items, BATCH) if later else []
    snaps = dict(zip((id(r) for r in later), got, strict=True))
    planned = []
    for run in live:
        snap = run.start.snapshot or snaps[id(run)]
        run.snap = snap
        if not run.lease.confirmed(snap.held, snap.sent_at):
            run.report.busy = True
            run.lease.release()
            run.done = run.rerun = True  # as above: runs again after the batch
            continue
        run.rerun = bool(snap.rows)  # sent while this ran: a run of its own after
        if run.report.inbox:
            bus.metrics.incr("messages_in", run.report.inbox)
        planned.append(run)
    for run in planned:
        assert run.snap is not None
        store.set_trim_floor(run.sid, bus.settings.stream_keep, run.snap.stream_len)
    _plan_and_notice(bus, planned)
    # The unlocks with the hand-off flags, in one round trip (a run that wrote a notice
    # was unlocked in its notice's last call: bus.delivery.batch._notices).
    ending = [r for r in planned if not r.done]
    for run in ending:
        run.lease.stop_renewing()
    agains = store.unlock_many([(r.sid, r.lease.token) for r in ending])
    for run, again in zip(ending, agains, strict=True):
        run.done = True
        # Lost on the way (a notice left in flight): as above, it runs again.
        run.rerun = run.rerun or again or run.lease.lost


def _plan_and_notice(bus: DeliveryHost, runs: list[_Run]) -> None:
    s = bus.settings
    now = bus.inbox.clock.now_ms()
    due: list[tuple[str, int]] = []
    noticing: list[_Run] = []
    for run in runs:
        snap = run.snap
        assert snap is not None
        info = snap.info
        marks = info is not None and (bus.floor.session_dir(run.sid) / PENDING_MARKS).exists()
        plan = None
        if info is not None:
            view = bus.inbox.view_of(info, snap.view)
            plan = policy.decide(
                view, now, int(s.wake_debounce_s * 1000), int(s.fyi_flush_s * 1000)
            )
        step = after_step(
            info, snap.notice_id, snap.floor_ids, marks, plan.action if plan else "wait"
        )
        run.plan = plan
        if step == "schedule" and plan is not None and plan.at is not None:
            due.append((run.sid, plan.at))
        elif step == "notice":
            noticing.append(run)
        elif step == "one":
            run.report.lease = run.lease
            bus.inbox.after_delivery(run.sid, run.report, snap)
            run.report.lease = None
    bus.store.schedule_many("due", due)
    _notices(bus, _fence(bus, noticing))


def _notices(bus: DeliveryHost, runs: list[_Run]) -> None:
    """:meth:`bus.delivery.inbox.Inbox.notice` for many sessions (no wake command among them): the
    notices taken in one round trip, written one by one, their records in one more."""
    if not runs:
        return
    store, inbox = bus.store, bus.inbox
    clock = inbox.clock
    nids = [f"ntc-{uuid.uuid4()}" for _ in runs]
    now = clock.now_ms()
    taken_all = store.run_scripts(
        [
            store.script_call(
                "notice_take",
                store.k.s_many(run.sid, ("notice", "new", "wakeq", "events", "msgs")),
                [nid, now],
            )
            for run, nid in zip(runs, nids, strict=True)
        ]
    )
    done: list[tuple[Any, ...]] = []
    ends: list[int] = []  # each sent notice's last call in ``done`` (its unlock's reply)
    sent: list[tuple[_Run, dict[str, Any]]] = []
    for i, (run, nid, taken) in enumerate(zip(runs, nids, taken_all, strict=True)):
        if not taken:
            continue
        plan = run.plan
        assert plan is not None
        wake = plan.action == "wake"
        # A record as this run kept it is the record it ingested: not restored again.
        records = [
            run.wholes.get(r) or packing.restore_record(r, run.sid) for r in taken_records(taken)
        ]
        summaries = notices.summarize([inbox._summary_input(r) for r in records])
        line = notices.notice_line(
            nid,
            run.sid,
            summaries,
            [r["id"] for r in records],
            clock.now_ms(),
            bus_host=bus.settings.host,
        )
        if any((r.get("m") or {}).get("urgency") == "urgent" for r in records):
            line["urgency"] = "urgent"
        # The fence before each write (the batch's may be older by now: slow sockets ahead
        # of it), for this run and those after it in one round trip. Lost: the notice
        # stays in flight, for the next holder to put back (Inbox._recover_notice), as
        # after a crash.
        if not run.lease.fresh():
            _fence(bus, [r for r in runs[i:] if not r.lease.lost])
        if run.lease.lost:
            continue
        try:
            via, _ = bus.floor.deliver(run.sid, line)
        except OSError as exc:
            inbox._revert(run.sid, nid, f"floor: {exc}")
            continue
        now = clock.now_ms()
        if via != "socket":
            faults.point("notice:after_append")
        # The lock freed and the hand-off flag taken in the notice's last call.
        run.lease.stop_renewing()
        done.extend(
            store.finish_calls(
                run.sid,
                nid,
                via,
                now,
                heard=via == "socket",
                running=wake,
                wake={"notice": nid, "reason": plan.reason} if wake else None,
                unlock=run.lease.token,
            )
        )
        ends.append(len(done) - 1)
        oldest = min(int(r.get("at") or now) for r in records)
        sent.append(
            (
                run,
                {
                    "notice": nid,
                    "via": via,
                    "messages": len(records),
                    "wake": wake,
                    "reason": plan.reason,
                    "_wait_s": max(0, now - oldest) / 1000,
                },
            )
        )
    if not sent:
        return
    # Packed, its scripts loaded at its head: the records' order (not run_scripts', which
    # runs a lost script last).
    replies = store.run_in_order(done)
    metrics = inbox.metrics
    for (run, notice), end in zip(sent, ends, strict=True):
        freed, again = (int(x) for x in replies[end])
        run.done = True
        # Sent more meanwhile, or the lock no longer ours (lost on the way): as after an
        # unlock (bus.delivery.batch._run_batch), it runs again.
        run.rerun = run.rerun or bool(again) or not freed
        metrics.incr("notices")
        metrics.observe_latency(notice.pop("_wait_s"))
        metrics.incr("deliveries", via=notice["via"])
        if notice["wake"]:
            metrics.incr("wakes" if notice["reason"] != "flush" else "flushes")
        run.report.notices.append(notice)


__all__ = ["CHUNK", "after_step", "deliver_many", "takes_batch"]
