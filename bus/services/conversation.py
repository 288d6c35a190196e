"""Reading and answering a session's threads: list, read, reply, withdraw.

Built on :class:`bus.delivery.inbox.Inbox`'s records: a thread's messages live in its own slot
(``P:{thr}:log``), each party's marks in the party's slot (``P:{sid}:msgs``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bus.core.clock import SYSTEM, Clock
from bus.core.errors import NotFound, Refused
from bus.core.models import SessionInfo, check_session_id, check_text, parse_message
from bus.core.models import now_ms as _now_ms
from bus.core.thread_views import UNREAD, thread_rows, thread_view
from bus.store.packing import json_list

from .sessions import no_session

if TYPE_CHECKING:
    from bus.delivery.receipts import Receipts
    from bus.store.store import Store

    from .routing import Router

WITHDRAW_WAIT_S = 10.0


class Conversation:
    """Threads as a session reads and answers them."""

    def __init__(
        self,
        store: Callable[[], Store],
        router: Router,
        receipts: Receipts,
        *,
        session: Callable[[str], SessionInfo],
        blocking: Callable[[], Any],
        clock: Clock = SYSTEM,
    ) -> None:
        self._store, self.router, self.receipts = store, router, receipts
        self.session, self._blocking, self.clock = session, blocking, clock

    @property
    def store(self) -> Store:
        return self._store()

    # -- reading, replying, withdrawing ---------------------------------------------------

    def threads(self, sid: str) -> list[dict[str, Any]]:
        """The session's threads, newest first (the thread row's fields)."""
        check_session_id(sid)
        store = self.store
        thread_ids = store.inbox.threads_of(sid)
        metas = store.inbox.thread_metas(thread_ids)
        return thread_rows(thread_ids, metas, store.inbox.all_records(sid), json_list)

    def parties(self, thread: str) -> list[str]:
        return json_list(self.store.inbox.thread_field(thread, "parties"))

    def read(self, sid: str, thread: str, *, mark_read: bool = False) -> dict[str, Any]:
        """A whole thread, oldest first; refused for a session that is not a party."""
        check_session_id(sid)
        meta = self.store.inbox.thread_meta(thread)
        if not meta:
            raise NotFound(f"no thread {thread!r}")
        if sid not in json_list(meta.get("parties")):
            raise Refused(f"session {sid!r} is not a party to {thread}", code="not_a_party")
        msgs = [json.loads(fields["m"]) for fields in self.store.inbox.thread_log(thread)]
        recs = {r["id"]: r for r in self.store.inbox.records(sid, [m["id"] for m in msgs])}
        result = thread_view(thread, meta, msgs, recs, mark_read=mark_read)
        if mark_read:
            self._mark_read(sid, [r for r in recs.values() if r["mark"] in UNREAD])
        return result

    def _mark_read(self, sid: str, recs: list[dict[str, Any]]) -> None:
        if not recs:
            return
        pipe = self.store.pipeline(transaction=True)
        self.store.inbox.queue_mark_read(pipe, sid, recs, self.clock.now_ms())
        self.receipts.mark(sid, "read", [r["id"] for r in recs], touch=True, client=pipe)
        pipe.execute()

    def reply(self, sid: str, thread: str, text: str) -> dict[str, Any]:
        """Answer into the other parties' inboxes under the same thread; wakes nobody."""
        check_text(text)  # bad input first, whatever the thread
        info, raw_parties, last, ids = self.store.inbox.reply_reads(check_session_id(sid), thread)
        if info is None:
            raise no_session(sid)
        parties = json_list(raw_parties)
        if not parties:
            raise NotFound(f"no thread {thread!r}")
        if sid not in parties:
            raise Refused(f"session {sid!r} is not a party to {thread}", code="not_a_party")
        others = [p for p in parties if p != sid]
        if not others:
            raise Refused(f"{thread} has no other party session to reply to", code="no_other_party")
        msg_id = str(uuid.uuid4())
        answers = []
        for other in others:
            answers.append(
                self.router.post(
                    parse_message(
                        {
                            "id": msg_id,
                            "from": info.handle,
                            "to_id": other,
                            "from_session": sid,
                            "text": text,
                            "kind": "reply",
                            "thread": thread,
                        }
                    )
                )
            )
        # The tail read before the post: the reply itself reaches the thread's log only at
        # its delivery, so it was never in it.
        self.receipts.replied(sid, thread, last, ids)
        return {"ok": True, "id": msg_id, "thread": thread, "to": others, "answers": answers}

    def withdraw(self, msg_id: str, by: str) -> dict[str, Any]:
        """Unsend before any notice; wait out a notice on its way; retract after."""
        check_session_id(by, "withdrawing session id")
        store = self.store
        sid = store.queue.recipient_of(msg_id)
        if sid is None:
            raise NotFound(f"no message {msg_id!r}")
        first, record, receipt, cursor = store.inbox.withdraw_reads(sid, msg_id)
        msg = dict(record["m"]) if record else sent_by(msg_id, receipt)
        msg = msg or self._message(sid, msg_id)
        if first is None or msg is None:
            raise NotFound(f"no message {msg_id!r}")
        if msg.get("from_session") != by:
            raise Refused("only the sender may withdraw a message", code="not_sender")
        verdict = self._withdraw_once(sid, msg_id)
        # A real deadline (the wait blocks on Redis), not the injectable clock.
        deadline = _now_ms() + int(WITHDRAW_WAIT_S * 1000)
        while verdict[0] == "wait" and _now_ms() < deadline:
            # Block on the session's records until the notice on its way lands or fails.
            got = store.events.wait_event(self._blocking(), sid, cursor, deadline - _now_ms())
            if got is not None:
                cursor = got
            verdict = self._withdraw_once(sid, msg_id)
        kind = verdict[0]
        if kind in ("unsent", "retract"):
            self.receipts.mark(sid, "withdrawn" if kind == "unsent" else "retracted", [msg_id])
        if kind == "unsent":
            return {"ok": True, "id": msg_id, "state": "unsent"}
        if kind == "already":
            return {"ok": True, "id": msg_id, "state": (first or {}).get("state", "withdrawn")}
        if kind == "retract":
            self.router.post(
                parse_message(
                    {
                        "from": msg["from"],
                        "to_id": sid,
                        "from_session": by,
                        "text": f"(withdrawn by the sender) {msg_id}",
                        "kind": "retraction",
                        "thread": msg.get("thread") or self.router.thread_for(parse_message(msg)),
                        "class": "fyi",
                    }
                )
            )
            return {"ok": True, "id": msg_id, "state": "retracted", "via": "inbox"}
        raise Refused(f"withdraw of {msg_id} timed out waiting for its notice", code="timeout")

    def _withdraw_once(self, sid: str, msg_id: str) -> list[str]:
        return self.store.inbox.withdraw(sid, msg_id, self.clock.now_ms())

    def _message(self, sid: str, msg_id: str) -> dict[str, Any] | None:
        """The message of ``msg_id`` that has neither an inbox record nor a receipt in its
        answers' hash: from the queue, else what a bounced receipt keeps."""
        for _eid, fields in self.store.queue.read_after(sid, "0-0", 100000):
            if fields.get("id") == msg_id:
                return dict(json.loads(fields["m"]))
        return sent_by(msg_id, self.store.receipts.receipt_rows([(sid, msg_id)])[0][0])


def sent_by(msg_id: str, receipt: dict[str, str]) -> dict[str, Any] | None:
    """What a withdraw needs of a message that has no inbox record, from its receipt: who
    sent it, from which session, in which thread. A queue the delivery took whole is
    emptied (queue_trim.lua), and a message withdrawn before its delivery has no record;
    its receipt still names its sender. (The id is the receipt's: its hash does not hold
    it.)"""
    if not receipt.get("from"):
        return None
    kept: dict[str, Any] = {
        f: receipt[f] for f in ("from", "from_session", "thread") if f in receipt
    }
    return {"id": msg_id, **kept}
