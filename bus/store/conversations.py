"""The store's side of a conversation: what a reply and a withdraw read first (one round
trip each), withdrawing a message, waiting on a session's records.

A part of the store's ``inbox`` aggregate (:class:`bus.store.store.Inbox`); the same contract.
"""

from __future__ import annotations

from typing import Any, cast

from bus.core.models import SessionInfo

from . import packing
from .base import StorePart
from .keys import receipt_field, reply_cursor_field
from .packing import meta_of
from .receipts import receipt_hash
from .session_record import record_info

# The session's keys withdraw.lua takes, in its KEYS order (all in the {sid} slot).
_WITHDRAW_KEYS = ("ids", "msgs", "new", "wakeq", "notice", "events")


class ConversationStore(StorePart):
    """A reply's and a withdraw's first reads; withdraw a message; wait for a session's
    next durability record."""

    def reply_reads(
        self, sid: str, thread: str
    ) -> tuple[SessionInfo | None, str | None, str, list[str]]:
        """What a reply by ``sid`` into ``thread`` reads before it posts, in one round trip:
        ``sid``'s record (``None`` if never put), the thread's ``parties`` field (``None``:
        no such thread), and ``thread_tail.lua``'s answer: the newest log id read (``""``:
        none) and the message ids past ``sid``'s reply cursor, oldest first. Nothing is
        written."""
        pipe = self.pipeline()
        pipe.hgetall(self.k.s(sid, "session"))
        pipe.hget(self.k.t(thread, "meta"), "parties")
        tail_keys = [self.k.t(thread, "meta"), self.k.t(thread, "log")]
        self.script("thread_tail")(keys=tail_keys, args=[reply_cursor_field(sid)], client=pipe)
        data, parties, (last, *ids) = pipe.execute()
        info = record_info(cast(dict[str, str], data), sid) if data else None
        return info, str(parties) if parties else None, str(last), [str(i) for i in ids]

    def session_and_thread(
        self, sid: str, thread: str
    ) -> tuple[SessionInfo | None, dict[str, str]]:
        """``sid``'s record (``None`` if never put) and ``thread``'s (``{}`` if none), in one
        round trip: what a decision on a typed thread reads first."""
        pipe = self.pipeline()
        pipe.hgetall(self.k.s(sid, "session"))
        pipe.hgetall(self.k.t(thread, "meta"))
        data, meta = pipe.execute()
        info = record_info(cast(dict[str, str], data), sid) if data else None
        return info, meta_of(meta)

    def withdraw_reads(
        self, sid: str, msg_id: str
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None, dict[str, str], str]:
        """What a withdraw of ``msg_id`` (appended to ``sid``) reads first, in one round
        trip: the id's first answer (``None``: never appended), its inbox record (``None``:
        none yet), its receipt kept in ``ids`` (``{}``: none there; as
        :func:`~bus.store.receipts.receipt_hash` reads it) and the id of the session's
        newest durability record (``0-0``: none)."""
        pipe = self.pipeline()
        pipe.hmget(self.k.s(sid, "ids"), [msg_id, receipt_field(msg_id)])
        pipe.hget(self.k.s(sid, "msgs"), msg_id)
        pipe.xrevrange(self.k.s(sid, "events"), count=1)
        (answer, folded), record, last = pipe.execute()
        return (
            packing.restore(cast(str, answer), sid, msg_id) if answer else None,
            packing.restore_record(record, sid) if record else None,
            receipt_hash(folded, answer) if folded else {},
            str(last[0][0]) if last else "0-0",
        )

    def withdraw(self, sid: str, msg_id: str, now_ms: int) -> list[str]:
        """Unsend ``msg_id`` if no notice has carried it, or say what else to do
        (``withdraw.lua``): ``[verdict, detail]``, the verdict one of ``unknown``,
        ``already``, ``unsent``, ``wait`` (a notice is on its way) or ``retract``."""
        out = self.script("withdraw")(
            keys=self.k.s_many(sid, _WITHDRAW_KEYS), args=[msg_id, now_ms]
        )
        return [str(x) for x in out]
