"""The one notice: taken, built, written to the floor, recorded, reverted or recovered.

Every notice a session hears goes through :meth:`Notices.send`, one notice or a batch's
many: the messages taken into the notice in flight (``notice_take.lua``, one round trip
for all), the line built from their records (:func:`notice_line`), the fence before each
write, the write to the socket or the file floor, and the records after it (one round
trip for all, :meth:`bus.store.store.Store.delivery.finish_calls`). A write that fails gives the
messages back (:meth:`Notices.revert`); a notice a killed worker left in flight is
settled by the next delivery (:meth:`Notices.recover`). A wake's command runs here too
(:meth:`Notices.run_wake_cmd`): the notice on its stdin, never keystrokes.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bus.core import faults, notices
from bus.core.clock import Clock
from bus.core.models import SessionInfo
from bus.core.policy import retry_delay_s
from bus.core.stamp import render_stamp
from bus.store import packing
from bus.store.delivery import taken_records
from bus.store.schedule import WAKE_TURN

from . import kept_wake, wake_cmd

if TYPE_CHECKING:
    from bus.core.settings import Settings
    from bus.store.store import Store
    from bus.telemetry.metrics import Metrics

    from .floor import Floor
    from .lease import Lease

log = logging.getLogger(__name__)


def summary_input(rec: dict[str, Any]) -> dict[str, Any]:
    """An inbox record as :func:`bus.core.notices.summarize` reads a message: what the
    message says, with the record's thread, class, key, sender and arrival."""
    msg = dict(rec.get("m") or {})
    msg.update(
        {
            "thread": rec["thread"],
            "class": rec.get("class"),
            "key": rec.get("key"),
            "from": rec.get("from"),
            "ts": rec.get("at"),
        }
    )
    return msg


def notice_line(
    nid: str, sid: str, records: list[dict[str, Any]], now: int, bus_host: str
) -> dict[str, Any]:
    """The notice ``nid``'s line for ``sid`` from the inbox records it carries: the
    threads summarised, the ids listed, ``urgency`` set when one of them is urgent (a
    listening harness may interrupt its turn for it), ``redelivered`` listing those an
    earlier notice carried and that were given back after a crash."""
    summaries = notices.summarize([summary_input(r) for r in records])
    line = notices.notice_line(
        nid, sid, summaries, [r["id"] for r in records], now, bus_host=bus_host
    )
    if any((r.get("m") or {}).get("urgency") == "urgent" for r in records):
        line["urgency"] = "urgent"
    again = [r["id"] for r in records if r.get("again")]
    if again:
        # Carried by an earlier notice that may have been heard (RabbitMQ's redelivered):
        # a harness that keeps what it was handed (bus.delivery.said) can tell for sure.
        line["redelivered"] = again
        line["text"] += "\n" + notices.redelivered_mark(len(again))
    return line


def new_notice_id() -> str:
    """A fresh notice id."""
    return f"ntc-{uuid.uuid4()}"


# Sends notices' records (the arguments of Store.delivery.finish_calls, in order) and answers each
# one's (freed, again): Notices.send's ``defer``.
Finisher = Callable[[list[dict[str, Any]]], list[tuple[bool, bool]]]


@dataclass
class NoticeJob:
    """One notice to send: for ``sid``, a wake or not, and why (the plan's reason).

    ``info``: the session record as the plan read it (``None``: read when needed);
    ``lease``: the delivery's lease, fenced before the write (``None``: the caller fenced
    it); ``unlock``: free the lock and take the hand-off flag in the notice's last call (a
    batch's run; not when a wake command is to run, which runs under the lock);
    ``wholes``: records as kept -> whole, as the batch ingested them (not restored again);
    ``taken``: ``(notice id, notice_take.lua's reply)`` when the notice was already taken
    into flight (in the delivery's snapshot call), else taken by :meth:`Notices.send`.
    After :meth:`Notices.send`: ``notice`` (what the report lists; ``None`` when nothing
    was sent), ``error`` (why the notice could not be written: put back for a retry),
    ``unlocked``, and with it ``freed`` and ``again``."""

    sid: str
    wake: bool
    reason: str
    info: SessionInfo | None = None
    lease: Lease | None = None
    unlock: bool = False
    wholes: dict[str, dict[str, Any]] | None = None
    taken: tuple[str, str] | None = None
    notice: dict[str, Any] | None = None
    error: str | None = None
    # The error is the one the session's last try failed with too (its retry backed off).
    repeated: bool = False
    unlocked: bool = False
    freed: bool = False
    again: bool = False


@dataclass
class _Sent:
    job: NoticeJob
    nid: str
    line: dict[str, Any]
    via: str
    run_cmd: bool
    wait_s: float
    messages: int


class Notices:
    """Notices on one store and one floor (``store`` and ``metrics``: providers)."""

    def __init__(
        self,
        store: Callable[[], Store],
        floor: Floor,
        settings: Settings,
        metrics: Callable[[], Metrics],
        clock: Clock,
    ) -> None:
        self._store, self.floor, self.settings = store, floor, settings
        self._metrics, self.clock = metrics, clock

    @property
    def store(self) -> Store:
        return self._store()

    def send(self, jobs: list[NoticeJob], defer: Finisher | None = None) -> None:
        """Send a notice for each job: what is new taken into a notice in flight (one
        round trip for all), each written in turn behind its fence, and their records
        (with the unlocks asked for) in one round trip. A job whose session had nothing
        new, whose lease was lost (its notice stays in flight, for the next holder:
        :meth:`recover`) or whose write failed (:meth:`revert`) sends nothing.

        ``defer``: when every notice sent is a steer heard on its socket and freeing its
        lock, their records are handed to it, which sends them at once and answers each
        one's ``(freed, again)`` (a kick loop sends its next wait in the same write and
        reads the replies with it: bus.delivery.kick_list)."""
        if not jobs:
            return
        store, clock = self.store, self.clock
        turn_ms = int(self.settings.wake_turn_timeout_s * 1000)
        nids = [j.taken[0] if j.taken else new_notice_id() for j in jobs]
        # The notices not taken into flight yet, in one round trip.
        to_take = [(j.sid, n) for j, n in zip(jobs, nids, strict=True) if j.taken is None]
        took = iter(store.delivery.take_notices(to_take, clock.now_ms()) if to_take else [])
        taken_all = [j.taken[1] if j.taken else next(took) for j in jobs]
        finishes: list[dict[str, Any]] = []
        sent: list[_Sent] = []
        for i, (job, nid, taken) in enumerate(zip(jobs, nids, taken_all, strict=True)):
            if not taken:
                continue
            wholes = job.wholes or {}
            records = [
                wholes.get(r) or packing.restore_record(r, job.sid) for r in taken_records(taken)
            ]
            line = notice_line(nid, job.sid, records, clock.now_ms(), self.settings.host)
            # The fence before each write (a batch's may be older by now: slow sockets
            # ahead of it), for this job and those after it in one round trip.
            if job.lease is not None and not job.lease.fresh():
                self._fence([j.lease for j in jobs[i:] if j.lease is not None])
            if job.lease is not None and job.lease.lost:
                continue
            try:
                via, _ = self.floor.write_line(job.sid, line)
            except OSError as exc:
                job.error = f"floor: {type(exc).__name__}: {exc}"
                job.repeated = self.revert(job.sid, nid, job.error, job.info)
                continue
            if job.info is not None and job.info.fault:  # written again: the fault is over
                store.sessions.update_session(job.sid, fault=None, fault_at=None, faults=None)
            now = clock.now_ms()
            # A wake starts a turn: until the harness reports its end the session counts
            # as running, so later messages join a steer instead of waking it again. The
            # wake command runs right after the state change (a Redis write failing in
            # between, a restart, would leave the session running with its harness never
            # told), and the wake record follows it; with no command to run the record
            # goes with the rest.
            info = job.info
            run_cmd = job.wake and via == "file" and (info is None or bool(info.wake_cmd))
            faults.point("notice:after_append" if via != "socket" else "notice:after_ack")
            job.unlocked = job.unlock and not run_cmd and job.lease is not None
            if job.unlocked and job.lease is not None:
                job.lease.stop_renewing()
            # The ack is the confirmation (floor_drained.lua, as Inbox.mark_noticed); a
            # file line is recorded written (a drain may already have taken and confirmed
            # it: then this finds nothing to record); a refused notice may be tried again
            # now. A worker killed before the wake command ran leaves ``wake_pending``:
            # the next delivery runs the command (bus.delivery.engine's plan stage).
            finishes.append(
                {
                    "sid": job.sid,
                    "nid": nid,
                    "via": via,
                    "now": now,
                    "heard": via == "socket",
                    "running": job.wake,
                    "wake": None
                    if not job.wake or run_cmd
                    else {"notice": nid, "reason": job.reason},
                    "wake_pending": nid if run_cmd else None,
                    "unlock": job.lease.token if job.unlocked and job.lease is not None else None,
                    # A wake's turn has INBOX_WAKE_TURN_TIMEOUT_S to begin, else the session
                    # is idle again (bus.delivery.scheduler): no harness may be there.
                    "turn_due": now + turn_ms if job.wake else None,
                }
            )
            oldest = min(int(r.get("at") or now) for r in records)
            sent.append(
                _Sent(
                    job,
                    nid,
                    line,
                    via,
                    run_cmd,
                    max(0, now - oldest) / 1000,
                    len(records),
                )
            )
        if not sent:
            return
        # One round trip, in the notices' order, sent straight after the last ack (a
        # worker killed between the ack and the records has the notice heard again).
        if defer is not None and all(
            s.via == "socket" and not s.job.wake and s.job.unlocked for s in sent
        ):
            unlocks = defer(finishes)
        else:
            unlocks = store.delivery.finish_notices(finishes)
        metrics = self._metrics()
        for s, (freed, again) in zip(sent, unlocks, strict=True):
            job = s.job
            if job.unlocked:
                job.freed, job.again = freed, again
            metrics.incr("notices")
            metrics.observe_latency(s.wait_s)
            metrics.incr("deliveries", via=s.via)
            if job.wake:
                metrics.incr("wakes" if job.reason != "flush" else "flushes")
            if s.run_cmd:
                faults.point("wake:before_cmd")
                self.run_wake_cmd(job.sid, s.line, job.info)
                store.delivery.wake_done(job.sid, s.nid, job.reason)
            job.notice = {
                "notice": s.nid,
                "via": s.via,
                "messages": s.messages,
                "wake": job.wake,
                "reason": job.reason,
            }

    def _fence(self, leases: list[Lease]) -> None:
        """Check the leases not fresh in one round trip (as each one's ``held``)."""
        stale = [lease for lease in leases if not lease.lost and not lease.fresh()]
        if not stale:
            return
        sent_at = time.monotonic()
        answers = self.store.delivery.extend_many([(lease.sid, lease.token) for lease in stale])
        for lease, ok in zip(stale, answers, strict=True):
            lease.confirmed(ok, sent_at)

    def revert(self, sid: str, nid: str, reason: str, info: SessionInfo | None = None) -> bool:
        """A notice whose write failed: its messages back to new, the fault kept in the
        session's record (``fault``, ``fault_at``, ``faults`` in a row: what the doctor
        shows), its retry put on the schedule, backed off with the failures in a row
        (:func:`bus.core.policy.retry_delay_s`). True when the session's last try failed
        for the same reason (the task is then no new failure: bus.delivery.report)."""
        store, now = self.store, self.clock.now_ms()
        store.delivery.revert_notice(sid, nid, now, reason)
        if info is None:
            info = store.sessions.get_session(sid)
        was = info.fault if info is not None else None
        count = ((info.faults or 0) if info is not None and was else 0) + 1
        retry_at = now + int(retry_delay_s(self.settings.retry_s, count) * 1000)
        fault_at = info.fault_at if info is not None and was == reason and info.fault_at else now
        store.sessions.update_session(
            sid, retry_at=retry_at, fault=reason, fault_at=fault_at, faults=count
        )
        store.schedule.schedule("retry", sid, retry_at)
        self._metrics().incr("retries")
        return was == reason

    def recover(self, sid: str, nid: str | None = "") -> bool:
        """A notice left in flight by a killed worker: on the floor → written; else → new.
        ``nid``: the notice in flight as already read (``""``: read it here). True when
        there was one."""
        store = self.store
        if nid == "":
            nid = store.inbox.notice_in_flight(sid)
        if not nid:
            return False
        if self.floor.contains_id(sid, nid):
            store.delivery.notice_written(sid, nid, self.clock.now_ms(), "file")
        else:
            # Not on the floor: never written, or heard on the socket before the worker
            # died. Either way its messages go again, listed as redelivered.
            store.delivery.revert_notice(
                sid, nid, self.clock.now_ms(), "recovered after a crash", again=True
            )
        return True

    def finish_wake(self, sid: str, nid: str, info: SessionInfo) -> None:
        """A wake whose worker died between the session's change to running and its wake
        command (we hold the lock, so that delivery is over): run the command now if the
        notice still waits on the floor (its harness was never told), then record it."""
        lines = [x for x in self.floor.peek(sid) if x.get("id") == nid]
        if lines:
            self.run_wake_cmd(sid, lines[-1], info)
            log.warning(
                "wake of %s for %s: its worker died before the command ran; ran it", sid, nid
            )
        self.store.delivery.wake_done(sid, nid, "recovered" if lines else "drained")

    def wake_for_floor(self, sid: str, reason: str, info: SessionInfo) -> None:
        """Wake an idle session for notices on its file floor that no drain took: written
        for a running turn that ended before its harness drained them (the turn's end
        raced the notice's write). Once per notice (``floor_woken.lua``)."""
        store = self.store
        nids = store.delivery.floor_woken(sid, self.clock.now_ms())
        if not nids:
            return
        lines = [x for x in self.floor.peek(sid) if x.get("id") in nids]
        if not lines:
            return  # drained meanwhile: the drain confirms them
        # As a wake with a fresh notice (send): running first, the command, then the
        # wake record.
        now = self.clock.now_ms()
        store.sessions.update_session(sid, state="running", woken_at=now)
        store.schedule.schedule(
            WAKE_TURN,
            sid,
            now + int(self.settings.wake_turn_timeout_s * 1000),
            earliest=False,
        )
        if info.wake_cmd:
            self.run_wake_cmd(sid, lines[-1], info)
        else:
            # A harness's waiter on the socket is woken by the line itself; it drains the
            # floor, which confirms the notice (bus.surfaces.harness.waiter).
            self.floor.offer(sid, lines[-1])
        store.events.record(sid, "wake", notice=str(lines[-1]["id"]), reason=reason)

    def run_wake_cmd(self, sid: str, line: dict[str, Any], info: SessionInfo | None = None) -> None:
        """Run the session's wake command, as its opener kept it on this host
        (bus.delivery.kept_wake), with the notices waiting on its floor merged into one
        on its stdin (each thread counted once, however many wakes wrote them; no shell
        unless the command uses shell syntax, and never the bus's secrets). A session
        whose harness is gone (its kept holders all ended) is closed instead."""
        if info is None:
            info = self.store.sessions.get_session(sid)
        if info is None or not info.wake_cmd:
            return
        # The command the session's opener kept on this host, never the record's: a
        # process that can write to Redis must not choose what runs here.
        cmd = kept_wake.kept(self.floor, sid)
        if cmd is None:
            log.warning(
                "wake_cmd for %s: none was registered on this host (the record's is not "
                "run); open the session here with --wake-cmd",
                sid,
            )
            return
        if kept_wake.holders_gone(self.floor, sid):
            self.close_gone(sid)
            return
        # No shell unless the command uses shell syntax, never the bus's secrets; the
        # notice on stdin, never keystrokes into a terminal. A turn outlasts a delivery:
        # the command is left to run, up to its limit (bus.delivery.wake_cmd).
        wake_cmd.start(
            sid,
            cmd,
            self.wake_text(sid, line),
            limit_s=self.settings.wake_cmd_timeout_s,
            path=kept_wake.kept_path(self.floor, sid),
            on_exit=lambda code: self.wake_ended(sid, code),
        )

    def wake_text(self, sid: str, line: dict[str, Any]) -> str:
        """The woken turn's prompt: every notice waiting on the floor up to ``line`` (a
        failed wake's notice too), merged into ONE notice."""
        waiting: list[dict[str, Any]] = []
        for x in self.floor.peek(sid):
            if x.get("kind") == "notice":
                waiting.append(x)
            if x.get("id") == line.get("id"):
                break
        if not any(x.get("id") == line.get("id") for x in waiting):
            waiting.append(line)
        return notices.render_drained(waiting, render_stamp) or str(line["text"])

    def wake_ended(self, sid: str, code: int | None) -> None:
        """The wake command ended: a failure (non-zero, or it never started) frees a
        session its wake left running with no turn heard, at once, and is kept as its
        ``wake_error`` (status, doctor); a success clears that."""
        if code == 0:
            kept_wake.note(self.floor, sid, "wake_error", None)
            info = self.store.sessions.get_session(sid)
            if info is not None and info.wake_error:
                self.store.sessions.update_session(sid, wake_error=None)
            return
        what = "could not start" if code is None else f"exited {code}"
        error = f"wake command {what} at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}"
        info = self.store.sessions.get_session(sid)
        if info is None:
            return
        if info.state == "running" and info.woken_at:  # no turn took the wake
            self.store.schedule.unschedule(WAKE_TURN, sid)
            self.store.sessions.update_session(sid, state="idle", woken_at=None, wake_error=error)
        else:
            self.store.sessions.update_session(sid, wake_error=error)
        kept_wake.note(self.floor, sid, "wake_error", error)
        self.store.events.record(sid, "wake_failed", error=error)
        log.warning("wake of %s failed: %s; the session is idle again", sid, error)

    def close_gone(self, sid: str) -> None:
        """The session's harness is gone (no holder alive): closed, as ``session close``
        would (waiting senders get the closing error), and no command runs."""
        self.store.schedule.unschedule(WAKE_TURN, sid)
        self.store.sessions.update_session(sid, state="closed", woken_at=None)
        self.answer_closed(sid, f"session {sid} closed: its harness is gone")
        self.store.events.record(sid, "session_gone")
        log.warning("%s: its harness is gone; the session is closed", sid)

    def answer_closed(self, sid: str, reason: str) -> None:
        """The senders waiting on ``sid``'s answer get the closing error, ``reason`` its why."""
        self.store.inbox.push_answers(
            sid,
            self.store.inbox.take_waiters(sid),
            {"ok": False, "state": "error", "error": "session_closed", "reason": reason},
        )
