"""The store's receipts side: receipt hashes, outboxes and the reads behind a receipt.

A part of the store's ``receipts`` aggregate (:class:`bus.store.store.Receipts`); :class:`bus.delivery.receipts.Receipts`
holds the policy and calls these for its Redis commands. Each batched read answers in its
callers' order in one round trip (every key of one row is in its recipient's slot), and a
missing thing reads empty.
"""

from __future__ import annotations

import json

from . import receipt_index
from .base import StorePart, store_failed
from .keys import receipt_field, reply_cursor_field
from .session_record import seen_state

# Not ``typing.TYPE_CHECKING``: importing typing alone costs the read lane several ms
# (bus.lanes.read imports this module).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def receipt_hash(folded: str | bytes, answer: str | bytes | None) -> dict[str, str]:
    """A receipt kept in ``ids`` (JSON; its thread, when it is its answer's, left to the
    answer) as a bounced receipt's ``rc:<id>`` hash reads: every value a string."""
    rc = json.loads(folded)
    if "thread" not in rc and answer:
        thread = json.loads(answer).get("thread")
        if isinstance(thread, str):
            rc["thread"] = thread
    return {str(f): str(int(v)) if isinstance(v, float) else str(v) for f, v in rc.items()}


class ReceiptStore(StorePart):
    """Receipts and outboxes."""

    def open_receipts(
        self, to: str, rows: list[tuple[str, list[Any]]], now: int, ttl_ms: int, *, pipeline: Any
    ) -> None:
        """Queue on ``pipeline`` the opening of the receipts of messages to ``to``
        (``receipt_open.lua``, one call): ``rows`` of ``(message id, [state, sender,
        sender's session, thread, reason])``, each kept ``ttl_ms``."""
        keys = [self.k.s(to, "ids"), *(self.k.receipt(to, msg_id) for msg_id, _ in rows)]
        args: list[Any] = [now, ttl_ms, to]
        for msg_id, fields in rows:
            args.extend([msg_id, *fields])
        self.script("receipt_open")(keys=keys, args=args, client=pipeline)

    @store_failed
    def mark_receipts(
        self,
        sid: str,
        state: str,
        ids: list[str],
        now: int,
        ttl_ms: int,
        *,
        touch: bool = False,
        pipeline: Any = None,
    ) -> None:
        """Stamp ``state`` on the receipts of ``ids`` (messages to ``sid``), kept
        ``ttl_ms``; with ``touch``, the session's ``last_seen`` set to ``now`` too
        (``receipt_mark.lua``, one call; queued on ``pipeline`` when given)."""
        k = self.k
        keys = [k.s(sid, "session"), k.s(sid, "events"), k.s(sid, "ids"), *k.receipts(sid, ids)]
        args = [state, now, ttl_ms, "1" if touch else "0", *ids]
        self.script("receipt_mark")(keys=keys, args=args, client=pipeline)

    def move_reply_cursor(self, thread: str, sid: str, last: str) -> None:
        """``sid``'s replies have marked ``thread`` up to log id ``last``."""
        self.r.hset(self.k.t(thread, "meta"), reply_cursor_field(sid), last)

    def index_recipients(self, rows: list[tuple[str, str]], now: int, *, pipeline: Any) -> None:
        """Queue on ``pipeline`` the recipient index entries of ``(message id, session)``
        rows (:meth:`~bus.store.store.Store.queue.recipient_of` finds them)."""
        receipt_index.index(pipeline, self.k, rows, now)

    def expire_unnoticed(self, sid: str, cutoff: int, now: int) -> list[str]:
        """Messages to ``sid`` stored before ``cutoff`` that no notice took: dropped from
        the inbox's new and wake sets and the floor's records (``expire.lua``); their ids."""
        keys = self.k.s_many(sid, ("new", "wakeq", "msgs", "floor", "events"))
        return [str(i) for i in self.script("expire")(keys=keys, args=[cutoff, now])]

    def queue_outbox_add(
        self, pipe: Any, sender: str, members: dict[str, int], keep: int, floor: int
    ) -> None:
        """Queue on ``pipe`` (no round trip of its own): add ``members`` (``"to|id"`` →
        score) to ``sender``'s outbox unless listed, keep its newest ``keep`` and drop
        those scored below ``floor``."""
        outbox = self.k.outbox(sender)
        pipe.zadd(outbox, members, nx=True)
        pipe.zremrangebyrank(outbox, 0, -(keep + 1))
        pipe.zremrangebyscore(outbox, "-inf", floor)

    def receipts_exist(self, rows: list[tuple[str, str]]) -> list[bool]:
        """Whether a receipt exists for each ``(recipient, id)``, in order."""
        pipe = self.r.pipeline(transaction=False)
        for to, msg_id in rows:
            pipe.hexists(self.k.s(to, "ids"), receipt_field(msg_id))
            pipe.exists(self.k.receipt(to, msg_id))
        got = pipe.execute()
        return [bool(got[2 * n] or got[2 * n + 1]) for n in range(len(rows))]

    def outbox_remove(self, entries: list[tuple[str, str, str]]) -> None:
        """Drop each ``(sender, recipient, id)`` from its sender's outbox, one round trip
        (none for no entries)."""
        pipe = self.r.pipeline(transaction=False)
        for sender, to, msg_id in entries:
            pipe.zrem(self.k.outbox(sender), f"{to}|{msg_id}")
        pipe.execute()

    def receipt_rows(self, rows: list[tuple[str, str]]) -> list[list[Any]]:
        """For each ``(recipient, id)``: ``[receipt hash ({} if none), stored record,
        first answer, [recipient state, last_seen, opened_at, host]]`` (``None`` where unset).
        A receipt kept in ``ids`` reads as a bounced one's hash (:func:`receipt_hash`)."""
        pipe = self.r.pipeline(transaction=False)
        for to, msg_id in rows:
            ids = self.k.s(to, "ids")
            pipe.hmget(ids, [receipt_field(msg_id), msg_id])
            pipe.hgetall(self.k.receipt(to, msg_id))
            pipe.hget(self.k.s(to, "msgs"), msg_id)
            pipe.hmget(self.k.s(to, "session"), ["host", "state", "last_seen", "opened_at"])
        got = pipe.execute()
        out = []
        for n in range(len(rows)):
            (folded, answer), h, rec, (host, state, *seen) = got[4 * n : 4 * n + 4]
            seen = [seen_state(host, state), *seen, host]
            out.append([receipt_hash(folded, answer) if folded else h, rec, answer, seen])
        return out

    def may_expire(self, sids: list[str], cutoff: int) -> list[bool]:
        """Whether each session holds an unnoticed message older than ``cutoff`` ms or a
        floor entry (so an expiry pass there may find work), in order."""
        pipe = self.r.pipeline(transaction=False)
        for sid in sids:
            pipe.zrangebyscore(self.k.s(sid, "new"), "-inf", f"({cutoff}", start=0, num=1)
            pipe.hlen(self.k.s(sid, "floor"))
        got = pipe.execute()
        return [bool(got[2 * n] or got[2 * n + 1]) for n in range(len(sids))]
