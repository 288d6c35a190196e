"""The inbox: agent messages land in threads and the session hears ONE notice.

The host worker's delivery (:mod:`bus.delivery.engine`) calls :meth:`Inbox.ingest` for
each read it takes from the session's stream and plans from :meth:`Inbox.decide` once per
run; the pure rules in :mod:`bus.core.policy` decide whether to steer a notice in now, wake the session after the
debounce, flush after at most ``fyi_flush_s``, or wait. Marks move ``new → noticed`` only
when the notice is confirmed (a socket ack, or the drain that took it off the floor and
recorded it: :meth:`Inbox.mark_noticed`); a notice that failed, or that a dead drainer took
and never confirmed (:meth:`Inbox.sweep_floor`, bus.delivery.heard), gives its messages back, new. Every transition is one Lua script in the
session's slot and leaves a durability record in ``P:{sid}:events``.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bus.core import notices, policy
from bus.core.clock import SYSTEM, Clock
from bus.core.models import SessionInfo
from bus.core.stamp import render_stamp
from bus.core.text import one_line
from bus.core.threads import thread_of
from bus.store import packing
from bus.store.redis_errors import RedisUnavailable

from . import heard
from .drain_marks import PENDING_MARKS, notice_ids, pending_ids, record_drained
from .notice import Notices
from .raw_lines import RawLines
from .receipts import receipt_ttl_ms

if TYPE_CHECKING:
    from bus.core.settings import Settings
    from bus.store.store import Store
    from bus.telemetry.metrics import Metrics

    from .floor import Floor
    from .receipts import Receipts
    from .report import DeliveryReport

THREAD_LOG_MAX = 5000
# A waited send whose store stopped answering tries again after these pauses (doubling).
WAIT_RETRY_FIRST_S = 0.1
WAIT_RETRY_MAX_S = 1.0


@functools.lru_cache(maxsize=4096)
def _parties_json(sid: str, sender_sid: str | None) -> str:
    """A new thread's parties (thread_append.lua): the receiver, and its sender's session."""
    return json.dumps([sid] + ([sender_sid] if sender_sid else []))


def _no_answer(stored: dict[str, Any], timeout: float | None) -> dict[str, Any]:
    return {
        **stored,
        "ok": False,
        "state": "error",
        "error": "timeout",
        "reason": f"no answer within {timeout}s; the message stays stored",
    }


class _SenderFacts:
    """What the wake rules need to know about each sender, looked up once per batch."""

    def __init__(
        self,
        ib: Inbox,
        sid: str,
        info: SessionInfo | None,
        handles: dict[str, str | None] | None = None,
    ) -> None:
        self.ib, self.sid, self.info = ib, sid, info
        self._gave: dict[str, bool] = {}
        # A handle's session does not depend on the receiver: shareable across a batch.
        self._handles: dict[str, str | None] = {} if handles is None else handles
        self._first_work_recorded: set[str] = set()

    def session_of(self, handle: str) -> str | None:
        """The one live session with ``handle`` (a sender that gave no session id)."""
        if handle not in self._handles:
            try:
                found = [
                    s
                    for s in self.ib.store.sessions.sessions_by_handle(handle)
                    if s.state != "closed"
                ]
            except ValueError:
                found = []
            self._handles[handle] = found[0].session if len(found) == 1 else None
        return self._handles[handle]

    def carried(self, sender_sid: str, gave: bool) -> None:
        """What the send of ``sender_sid``'s message found :meth:`gave_work_to` to be."""
        self._gave.setdefault(sender_sid, gave)

    def gave_work_to(self, sender_sid: str) -> bool:
        """Whether this session gave ``sender_sid`` work (its first work, or as parent)."""
        if sender_sid not in self._gave:
            store, info = self.ib.store, self.info
            recorded, sender = store.sessions.gave_and_session(self.sid, sender_sid)
            self._gave[sender_sid] = policy.gave_work(
                recorded,
                sender.parent if sender is not None else None,
                self.sid,
                info.handle if info is not None else None,
            )
        return self._gave[sender_sid]

    def may_wake(self, msg: dict[str, Any], sender_sid: str | None) -> tuple[bool, str]:
        info = self.info
        if info is None:
            return False, "no_session"
        facts = policy.WakeFacts(
            msg_class=str(msg.get("class", "action")),
            kind=str(msg.get("kind", "message")),
            from_session=sender_sid,
            from_handle=str(msg["from"]),
            receiver_parent=info.parent,
            receiver_delegator=info.delegator,
            receiver_turns=info.turns,
            receiver_gave_work_to_sender=sender_sid is not None and self.gave_work_to(sender_sid),
            from_member=policy.from_member(info, msg, self.ib.store.members.member_status),
        )
        giver = sender_sid or str(msg["from"])
        if policy.is_first_work(facts) and giver not in self._first_work_recorded:
            self._first_work_recorded.add(giver)
            self.ib.store.sessions.set_delegator_once(self.sid, giver)
            if sender_sid:
                self.ib.store.sessions.add_gave(sender_sid, self.sid)
        return policy.may_wake(facts)


class Inbox:
    """Inbox operations on one store and one floor.

    ``store``, ``metrics`` and ``blocking`` are providers (called on use): a drain or a
    hook that never reaches Redis never connects. ``clock`` decides the plan's time.
    """

    def __init__(
        self,
        store: Callable[[], Store],
        floor: Floor,
        settings: Settings,
        *,
        receipts: Receipts,
        metrics: Callable[[], Metrics],
        blocking: Callable[[], Any],
        clock: Clock = SYSTEM,
    ) -> None:
        self._store, self.floor, self.settings = store, floor, settings
        self.receipts, self._metrics, self._blocking = receipts, metrics, blocking
        self.clock = clock
        self.raw = RawLines(store, floor, receipts, metrics, clock)
        self.notices = Notices(store, floor, settings, metrics, clock)

    @property
    def store(self) -> Store:
        return self._store()

    @property
    def metrics(self) -> Metrics:
        return self._metrics()

    # -- taking messages in ---------------------------------------------------------------

    def ingest(
        self,
        sid: str,
        batch: list[tuple[dict[str, Any], int]],
        info: SessionInfo | None,
        report: DeliveryReport,
        pipe: Any = None,
        handles: dict[str, str | None] | None = None,
        raws: list[str] | None = None,
        wholes: dict[str, dict[str, Any]] | None = None,
        facts: list[str] | None = None,
    ) -> None:
        """Take a batch of ``(message, arrival ms)`` into their threads and the session's
        inbox. Doing it twice is harmless (a redone delivery), so the caller moves the
        cursor after the batch. Lookups are made once per sender; the writes (two
        idempotent scripts a message) go to Redis in one pipeline (``pipe``: queued on
        that one, which the caller sends; ``handles``: the senders' sessions by handle
        as found for other sessions of the caller's batch, bus.delivery.engine; ``raws``: each
        message's wire JSON as the queue holds it, logged as it is; ``wholes``: filled
        with each record as kept -> the record whole, what bus.store.packing.restore_record would
        give, for the notice that follows; ``facts``: each message's wake facts as its
        send kept them, ``g``/``-`` for its ``from_session``, looked up when ``""``)."""
        store = self.store
        senders = _SenderFacts(self, sid, info, handles)
        own = pipe is None
        if own:
            pipe = store.pipeline()
        # One call per thread and one for the inbox (the scripts take many messages, in
        # order): a batch of thousands costs Redis and the client per call.
        appends: dict[str, list[Any]] = {}
        takes: list[Any] = []
        for n, (msg, arrived) in enumerate(batch):
            key, thread = thread_of(sid, msg)
            sender_sid = msg.get("from_session") or senders.session_of(str(msg["from"]))
            if facts and facts[n] and sender_sid and sender_sid == msg.get("from_session"):
                senders.carried(sender_sid, facts[n] == "g")
            at = int(msg.get("ts") or self.clock.now_ms())
            wakes, reason = senders.may_wake(msg, sender_sid)
            whole = packing.whole_record(
                msg, key=key, thread=thread, sender_sid=sender_sid, at=at, wakes=wakes,
                why=reason,
            )  # fmt: skip
            # Both kept forms in one pass (the batch's delivery pays this per message).
            record, one_m = packing.keep_ingested(whole, sid)
            if wholes is not None:
                wholes[record] = whole
            preview = one_line(str(msg.get("text") or ""), 120)
            appends.setdefault(thread, []).extend(
                (
                    msg["id"],
                    # The queue's wire JSON when the caller has it (no spaces either).
                    raws[n] if raws else json.dumps(msg, separators=(",", ":")),
                    at,
                    key,
                    "",  # the label: its key's (store_inbox.thread_meta), not stored
                    _parties_json(sid, sender_sid),
                    msg["from"],
                    preview,
                    msg.get("class", "action"),
                    THREAD_LOG_MAX,
                    one_m,  # the thread's one_m while it is the only one
                    "1" if packing.newest_of_message(msg, at, preview) else "",
                )
            )
            takes.extend(
                (
                    msg["id"],
                    record,  # kept without what its message says (bus.store.packing)
                    # Debounce and flush count from when the bus stored it (the stream
                    # entry's Redis clock), not the sender's own clock.
                    arrived,
                    "1" if wakes else "0",
                    thread,
                )
            )
            report.inbox += 1
        for thread, args in appends.items():
            store.inbox.append_to_thread(thread, args, pipeline=pipe)
        if takes:
            store.inbox.take_into_inbox(sid, takes, pipeline=pipe)
        if own:
            pipe.execute()

    # -- deciding and noticing ------------------------------------------------------------

    def view(self, sid: str, info: SessionInfo) -> policy.InboxView:
        """The plan's view of ``sid``'s inbox, read now."""
        return self.view_of(info, self.store.inbox.inbox_view(sid))

    def decide(self, view: policy.InboxView) -> policy.Plan:
        """The plan for a session's inbox now (:func:`bus.core.policy.decide` with this
        bus's debounce and flush)."""
        s = self.settings
        return policy.decide(
            view, self.clock.now_ms(), int(s.wake_debounce_s * 1000), int(s.fyi_flush_s * 1000)
        )

    def view_of(self, info: SessionInfo, v: dict[str, int | None]) -> policy.InboxView:
        """The plan's view from the inbox's reads (a delivery's snapshot, or read now)."""
        agent_inbox = self.settings.agent_inbox if info.agent_inbox is None else info.agent_inbox
        return policy.InboxView(
            state=info.state,
            agent_inbox=agent_inbox,
            prompt_waiting=info.prompt_waiting,
            pending=int(v["pending"] or 0),
            first_wake_at=v["first_wake_at"],
            first_pending_at=v["first_pending_at"],
            building=bool(v["building"]),
            retry_at=v["retry_at"],
            floor_wake_at=v.get("floor_wake_at"),
            floor_first_at=v.get("floor_first_at"),
        )

    def pending_raw(self, sid: str, report: DeliveryReport) -> None:
        """Closing or switched off: what waits in the inbox goes out raw, nothing lost."""
        for rec in self.store.inbox.records(sid, self.store.inbox.new_ids(sid)):
            msg = rec.get("m")
            if msg:
                self.raw.write(sid, msg, report)
            self.store.inbox.drop_new(sid, rec["id"])

    def records(self, sid: str, ids: list[str]) -> list[dict[str, Any]]:
        """The inbox records of ``ids`` (see :meth:`bus.store.store.Store.inbox.records`)."""
        return self.store.inbox.records(sid, ids)

    # -- harness events -------------------------------------------------------------------

    def on_turn(self, sid: str, event: str, answer: str | None) -> dict[str, Any]:
        # A refused notice is tried again at the next turn start or end, not only after
        # the retry delay.
        self.store.sessions.clear_retry(sid)
        self.store.schedule.unschedule("retry", sid)
        if event != "end":
            return {}
        # The ids the turn carried, read in one MULTI with the answer (the receipts' stamp).
        carried, waiting = self.store.inbox.answer_turn(sid, answer, self.clock.now_ms())
        if answer is not None:
            self.receipts.mark(sid, "answered", carried)
        self.store.inbox.push_answers(
            sid, waiting, {"ok": True, "state": "answered", "answer": answer}
        )
        self.prune(sid)
        return {"answered": len(waiting)}

    def on_close(self, sid: str) -> None:
        """Waiting senders get the closing error; threads stay readable."""
        self.notices.answer_closed(sid, f"session {sid} closed before answering")

    def register_waiter(self, sid: str, msg_id: str) -> None:
        self.store.inbox.add_waiter(sid, msg_id)

    def wait_answer(
        self, sid: str, msg_id: str, stored: dict[str, Any], timeout: float | None
    ) -> dict[str, Any]:
        """Block (BLPOP) until the turn that carried ``msg_id`` answers, or the timeout.
        A store that stops answering meanwhile (a failover, a restart, a read timing out)
        is waited out, within the timeout: the answer is kept in the store (the list and
        the first answer), and the message stays stored either way."""
        deadline = time.monotonic() + timeout if timeout else None
        pause = WAIT_RETRY_FIRST_S
        while True:
            try:
                return self._wait_answer_once(sid, msg_id, stored, deadline, timeout)
            except RedisUnavailable:
                if deadline is not None and time.monotonic() + pause >= deadline:
                    return _no_answer(stored, timeout)
                time.sleep(pause)  # nothing to block on while the store is away
                pause = min(pause * 2, WAIT_RETRY_MAX_S)

    def _wait_answer_once(
        self,
        sid: str,
        msg_id: str,
        stored: dict[str, Any],
        deadline: float | None,
        timeout: float | None,
    ) -> dict[str, Any]:
        prior = self.store.queue.first_answer(sid, msg_id) or {}
        if prior.get("state") in ("answered", "withdrawn", "retracted"):
            return {**stored, **prior}
        left = 0.0 if deadline is None else deadline - time.monotonic()
        got = None
        if deadline is None or left > 0:
            # The blocking client: BLPOP's own timeout bounds the wait, not the socket's.
            got = self.store.inbox.pop_answer(self._blocking(), sid, msg_id, left)
        if got is None:
            return _no_answer(stored, timeout)
        answer = json.loads(got)
        return {**stored, **answer}

    def mark_noticed(self, sid: str, nids: list[str], via: str) -> int:
        """Confirm notices heard (``via`` socket or drain): their messages move
        ``new → noticed``. Every such move goes through here (``floor_drained.lua``)."""
        return self.store.inbox.confirm_notices(sid, nids, via, self.clock.now_ms())

    def sweep_floor(self, sid: str, now: int | None = None, nids: list[str] | None = None) -> int:
        """Notices written to the floor and never confirmed: those a dead drainer took off
        are given back to ``new`` (see bus.delivery.heard). Returns how many were given back.
        ``nids``: the floor's unconfirmed notices as already read (``None``: read here)."""
        if nids is None:
            nids = self.store.inbox.floor_notice_ids(sid)
        if not nids:
            return 0
        there = self.floor.pending_ids(sid)
        # Marks a drain deferred while Redis was down count as confirmations on their way.
        there.update(pending_ids(self.floor.session_dir(sid) / PENDING_MARKS))
        now = self.clock.now_ms() if now is None else now
        return self.store.inbox.sweep_floor_notices(
            sid, now, heard.GONE_GRACE_MS, {n: n in there for n in nids}
        )

    def on_drain(self, sid: str, lines: list[dict[str, Any]]) -> None:
        """Notices taken off the floor are noticed; with Redis down, remember them in
        ``marks.pending.jsonl`` for the next drain or delivery (bus.delivery.drain_marks)."""
        record_drained(
            self.floor,
            sid,
            notice_ids(lines),
            lambda ids: self.mark_noticed(sid, ids, "drain"),
        )

    def render(self, lines: list[dict[str, Any]]) -> str:
        return notices.render_drained(lines, render_stamp)

    def prune(self, sid: str) -> int:
        """Let go of answered and read messages past the retention bound; never unread ones.

        Send answers (what a resend of an id gets) are kept for
        :data:`bus.store.inbox.IDS_KEEP_MS`, longer than the messages themselves.
        """
        return self.store.inbox.prune(
            sid,
            self.settings.retain_messages,
            self.clock.now_ms(),
            receipt_ttl_ms(self.settings.expire_s),  # a receipt beside its answer waits
        )
