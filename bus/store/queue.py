"""The store's queues: each session's stream of messages, stored once per id, and its cursor.

A part of the store's ``queue`` aggregate (:class:`bus.store.store.Queue`). A send appends once
per message id (``append.lua``: the stream entry, the id's answer, the dispatch flag); a
delivery reads after the cursor and moves it; the raw line in flight is recorded until the
cursor passes it; delivered entries are trimmed. Every key is in the session's ``{sid}``
slot, except the message id's recipient index (:mod:`bus.store.receipt_index`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any, cast

from bus.core.errors import RateLimited
from bus.core.models import now_ms

from . import packing, receipt_index
from .base import StorePart
from .beats import beat_reply, queue_beat_read
from .kick import KICK_CAP
from .redis_errors import store_failed


class QueueStore(StorePart):
    """A session's queue: append, read, cursor, trim."""

    def append(
        self,
        sid: str,
        msg_id: str,
        wire_json: str,
        answer_json: str,
        thread: str = "",
        also: Callable[[Any], None] | None = None,
        *,
        max_held: int = 0,
        facts: str = "",
        receipt: tuple[str, str, str] | None = None,
        kick_host: str | None = None,
        durability: tuple[str, float] = ("memory", 0.0),
        beat_into: list[tuple[int | None, int | None]] | None = None,
        beat_of: str = "",
    ) -> tuple[bool, str, bool]:
        """Store a message once. Returns (new, answer JSON, dispatch a delivery).

        The first append of ``msg_id`` for ``sid`` adds one stream entry, keeps
        ``answer_json`` as the id's answer, indexes the id's recipient and answers
        ``(True, answer_json, d)``, ``d`` true when no delivery was already pending (the
        dispatch flag is then set). Every later append of the id answers ``(False, the
        first answer, False)`` and writes nothing. With ``max_held`` > 0, a session
        already holding that many messages (queue plus inbox records) refuses it:
        :class:`RateLimited` ``inbox_full``, nothing stored (and no receipt opened).
        ``facts``: the receiver's wake facts about the sending session, kept beside the
        message in its entry (``w``: ``g`` gave it work, ``-`` not; bus.delivery.inbox
        reads them instead of looking them up). ``receipt``: ``(from handle, from session,
        reason)`` of the sender's receipt, opened in the append's own call once the id is
        stored (``receipt_open.lua``'s rule; none on a refusal). ``kick_host``: the
        receiver's host, whose kick list (``INBOX_KICK=list``) takes the dispatch in the
        same call when one of its delivery loops is alive (as
        :meth:`~bus.store.kick.KickStore.push_kicks`), so the answer's ``d`` is false then;
        on a cluster the list is in another slot and the caller dispatches as without it.

        One round trip: the append script and the message id's index (another slot,
        idempotent, so it need not be atomic with the append) go in one pipeline, and so
        do the steps ``also`` queues on it after the append (the sender's outbox entry),
        sent without the script's source (:meth:`~bus.store.many.RoundTrips.execute_loaded`:
        a server that lost it answers ``NOSCRIPT``, and the append alone is loaded and run
        then; the steps around it are independent of it).
        """
        k = self.k
        now = now_ms()
        pipe = self.pipeline()
        keys = k.s_many(sid, ("stream", "ids", "threads", "pending", "trim", "events", "msgs"))
        args = [msg_id, wire_json, answer_json, now, self.lock_ttl_ms, thread, max_held, facts]
        if receipt is not None:
            keys.append(k.receipt(sid, msg_id))
            args.extend(["1", *receipt])
        if kick_host is not None and not self.cluster:
            if receipt is None:
                args.extend(["", "", "", ""])
            keys += [k.kick_list(kick_host), k.kick_alive(kick_host)]
            args += [KICK_CAP, sid]
        self.script("append")(keys=keys, args=args, client=pipe)
        receipt_index.index(pipe, k, [(msg_id, sid)], now)
        if also is not None:
            also(pipe)
        if beat_into is not None:
            queue_beat_read(pipe, k, beat_of)
        level, timeout_s = durability
        replies = self.execute_durable(pipe, level, timeout_s, [msg_id], [sid])
        new, answer, dispatch = replies[0]
        if beat_into is not None:
            beat_into.append(beat_reply(replies[-1]))
        if int(new) < 0:
            receipt_index.unindex(self.r, k, msg_id, now)
            raise RateLimited(
                f"session {sid} holds {max_held} messages already; nothing was stored",
                code="inbox_full",
                session=sid,
            )
        return bool(new), str(answer), bool(dispatch)

    def take_send_token(self, sender: str, rate: float, burst: float) -> bool:
        """One token from ``sender``'s bucket (``rate`` a second, ``burst`` at most)."""
        return bool(self.script("rate")(keys=[self.k.bucket(sender)], args=[rate, burst]))

    @store_failed
    def first_answer(self, sid: str, msg_id: str) -> dict[str, Any] | None:
        """The answer kept by the first append of ``msg_id``; ``None`` if never appended."""
        raw = self.r.hget(self.k.s(sid, "ids"), msg_id)
        return packing.restore(cast(str, raw), sid, msg_id) if raw else None

    def first_answers(self, sid: str, msg_ids: list[str]) -> list[dict[str, Any] | None]:
        """The send answers of several ids, one round trip."""
        if not msg_ids:
            return []
        raws = self.r.hmget(self.k.s(sid, "ids"), msg_ids)
        pairs = zip(raws, msg_ids, strict=True)
        return [packing.restore(raw, sid, i) if raw else None for raw, i in pairs]

    def recipient_of(self, msg_id: str) -> str | None:
        """The session ``msg_id`` was appended to (kept 7 days); ``None`` if unknown."""
        return receipt_index.lookup(self, self.k, msg_id, now_ms())

    def recipients_of(self, msg_ids: list[str]) -> dict[str, str]:
        """The session each of ``msg_ids`` was appended to, those found (one round trip)."""
        return receipt_index.lookup_many(self, self.k, msg_ids, now_ms())

    def move_recipient_index(self) -> int:
        """The recipient index's buckets of earlier versions moved to today's names, once
        (:func:`~bus.store.receipt_index.move_day_first`): how many were moved."""
        return receipt_index.move_day_first(self, self.k, now_ms())

    def mark_pending(self, sid: str) -> bool:
        """Set the dispatch flag; True when the caller should dispatch a delivery."""
        return bool(self.r.set(self.k.s(sid, "pending"), "1", nx=True, px=self.lock_ttl_ms))

    def clear_pending(self, sid: str) -> None:
        """Drop the dispatch flag: the next :meth:`mark_pending` answers True."""
        self.delete_one(self.k.s(sid, "pending"))

    def last_stream_id(self, sid: str) -> str:
        """The id of the newest entry of the session's queue, ``0-0`` when it has none."""
        rows = self.r.xrevrange(self.k.s(sid, "stream"), count=1)
        return str(rows[0][0]) if rows else "0-0"

    def cursor(self, sid: str) -> str:
        """The last stream id the delivery took (:meth:`advance`), ``0-0`` before any."""
        return str(self.r.get(self.k.s(sid, "cursor")) or "0-0")

    def read_after(
        self, sid: str, cursor: str, count: int = 200
    ) -> list[tuple[str, dict[str, str]]]:
        """Up to ``count`` queue entries after stream id ``cursor``, oldest first, as
        ``(stream id, {"id": msg id, "m": wire JSON})``."""
        rows = self.r.xrange(self.k.s(sid, "stream"), min=f"({cursor}", count=count)
        return [(str(eid), cast(dict[str, str], fields)) for eid, fields in rows]

    def advance(self, sid: str, stream_id: str) -> None:
        """Move the cursor past ``stream_id`` and clear the raw in-flight record, atomically."""
        pipe = self.r.pipeline(transaction=True)
        pipe.set(self.k.s(sid, "cursor"), stream_id)
        pipe.delete(self.k.s(sid, "rawflight"))
        pipe.execute()

    def set_trim_floor(self, sid: str, keep: int, length: int | None = None) -> None:
        """Trim the queue's delivered entries after a delivery (one round trip, usually).

        When the delivery took every entry (the newest one is the cursor's), they all go
        (``queue_trim.lua``): an idle session's queue is an empty stream that keeps its last
        id, not a node of ``stream-node-max-bytes``. The messages live on in the inbox
        records and the thread log. While some remain undelivered, entries older than the
        last ``keep`` delivered ones may be trimmed by later XADDs; that tail is read only
        once the stream has grown to twice ``keep``, so its cost is paid once per ``keep``
        messages, not per delivery. ``length``: the queue's length after ``queue_trim.lua``
        ran in the caller's own round trip (the delivery's snapshot); else it runs here.
        """
        if length is None:
            length = int(self.run("queue_trim", sid, ("stream", "cursor"), []))
        if length <= 2 * keep:
            return
        cursor = self.cursor(sid)
        rows = self.r.xrevrange(self.k.s(sid, "stream"), max=cursor, count=keep + 1)
        if len(rows) > keep:
            floor = str(rows[-1][0])
            self.r.set(self.k.s(sid, "trim"), floor)
            self.r.xtrim(self.k.s(sid, "stream"), minid=floor, approximate=True)

    def rawflight(self, sid: str) -> dict[str, str] | None:
        """The raw line being written (``{"stream_id", "id"}``), until :meth:`advance`."""
        raw = self.r.get(self.k.s(sid, "rawflight"))
        return json.loads(cast(str, raw)) if raw else None

    def set_rawflight(self, sid: str, stream_id: str, msg_id: str) -> None:
        """Record the raw line about to be written, for recovery after a crash."""
        self.r.set(self.k.s(sid, "rawflight"), json.dumps({"stream_id": stream_id, "id": msg_id}))

    def flag_dispatched(self, sids: Iterable[str]) -> None:
        """Set each session's dispatch flag (``pending``, for the lock TTL) in one round trip,
        whether or not it was set: the caller is sending the delivery now."""
        pipe = self.pipeline()
        for sid in sids:
            pipe.set(self.k.s(sid, "pending"), "1", px=self.lock_ttl_ms)
        pipe.execute()

    def hosts_flagged(self, sids: list[str]) -> list[str | None]:
        """:meth:`session_hosts`, and :meth:`flag_dispatched` for those that exist, in one
        round trip: one script call for them all on a standalone server
        (``hosts_flag.lua``), two pipelines on a cluster."""
        if not sids:
            return []
        if self.cluster:
            hosts = self.session_hosts(sids)
            self.flag_dispatched(s for s, h in zip(sids, hosts, strict=True) if h is not None)
            return hosts
        keys = [key for sid in sids for key in self.k.s_many(sid, ("session", "pending"))]
        [reply] = self.run_scripts([self.script_call("hosts_flag", keys, [self.lock_ttl_ms])])
        return [host or None for host in json.loads(reply)]

    def mark_pending_many(self, sids: list[str]) -> list[bool]:
        """:meth:`~bus.store.store.Store.queue.mark_pending` for each of ``sids`` in one round trip:
        True for each whose dispatch flag this set (the caller dispatches it)."""
        pipe = self.pipeline()
        for sid in sids:
            pipe.set(self.k.s(sid, "pending"), "1", nx=True, px=self.lock_ttl_ms)
        return [bool(x) for x in pipe.execute()]

    def unindex_many(self, msg_ids: Iterable[str], now: int) -> None:
        """Forget the recipient index entries just written for ``msg_ids`` (their appends
        were refused), in one round trip."""
        pipe = self.pipeline()
        for msg_id in msg_ids:
            receipt_index.unindex(pipe, self.k, msg_id, now)
        pipe.execute()

    def queued_message(self, sid: str, msg_id: str) -> dict[str, str] | None:
        """The queue entry carrying ``msg_id`` while it is still queued."""
        for _eid, fields in self.r.xrange(self.k.s(sid, "stream"), count=1000):
            if fields.get("id") == msg_id:
                return dict(fields)
        return None

    def session_hosts(self, sids: list[str]) -> list[str | None]:
        """Each session's host, in order; ``None`` for a session that does not exist."""
        pipe = self.pipeline()
        for sid in sids:
            pipe.hget(self.k.s(sid, "session"), "host")
        return list(pipe.execute())
