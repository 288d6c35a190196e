"""The store's inbox and thread side: marks, notices, waiters, thread records.

A part of the store's ``inbox`` aggregate (:class:`bus.store.store.Inbox`). The storage
contract holds here as in :mod:`bus.store.store`: each docstring says what any backend
must do, and a read of a missing thing answers empty.
"""

from __future__ import annotations

import json

from . import packing
from .base import StorePart, store_failed
from .keys import IDS_KEEP_MS, receipt_field
from .packing import meta_of

# Not ``typing.TYPE_CHECKING``: importing typing alone costs the read lane several ms
# (bus.lanes.read imports this module).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

GONE_MARKS = ("answered", "read", "removed", "retracted", "expired")
# A send answer's age lives in the session's ``threads`` zset (one key
# fewer than a zset of its own): member ``#<message id>`` (no thread id nor message id
# has a ``#``), score minus the ms it was first seen, so every age sorts below 0 and
# every thread (scored by its newest ms) at or above it.
AGE_MARK = "#"
AGE_SCORE_BELOW = 0


def json_records(raws: list[Any]) -> list[dict[str, Any]]:
    """The JSON objects among ``raws`` (floor records); torn or foreign ones skipped."""
    out = []
    for raw in raws:
        try:
            rec = json.loads(raw)
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def view_of_replies(
    pending: Any, wake: Any, first: Any, building: Any, retry_at: Any, floor: list[Any]
) -> dict[str, int | None]:
    """The plan's view from its reads (:meth:`InboxStore.inbox_view`, or the same reads
    in a delivery's snapshot): ZCARD new, the first of wakeq and of new (with scores),
    EXISTS notice, the session's retry_at and the floor's records."""
    from bus.core.policy import floor_times  # pydantic: the read lane imports this module

    floor_wake_at, floor_first_at = floor_times(json_records(floor))
    return {
        "pending": int(pending),
        "first_wake_at": int(wake[0][1]) if wake else None,
        "first_pending_at": int(first[0][1]) if first else None,
        "building": int(bool(building)),
        "retry_at": int(retry_at) if retry_at else None,
        "floor_wake_at": floor_wake_at,
        "floor_first_at": floor_first_at,
    }


class InboxStore(StorePart):
    """Inbox and thread records of a :class:`~bus.store.store.Store`."""

    # -- the inbox ------------------------------------------------------------------------

    def inbox_view(self, sid: str) -> dict[str, int | None]:
        """What the plan needs, one round trip: ``pending`` (new count), ``first_wake_at``,
        ``first_pending_at``, ``building`` (1 while a notice is in flight), ``retry_at``,
        and of the floor's notices no drain took ``floor_wake_at`` / ``floor_first_at``
        (:func:`bus.core.policy.floor_times`)."""
        pipe = self.pipeline()
        pipe.zcard(self.k.s(sid, "new"))
        pipe.zrange(self.k.s(sid, "wakeq"), 0, 0, withscores=True)
        pipe.zrange(self.k.s(sid, "new"), 0, 0, withscores=True)
        pipe.exists(self.k.s(sid, "notice"))
        pipe.hget(self.k.s(sid, "session"), "retry_at")
        pipe.hvals(self.k.s(sid, "floor"))
        return view_of_replies(*pipe.execute())

    def records(self, sid: str, ids: list[str]) -> list[dict[str, Any]]:
        """The inbox records of ``ids`` that exist, in that order."""
        if not ids:
            return []
        raws = self.r.hmget(self.k.s(sid, "msgs"), ids)
        return [packing.restore_record(r, sid) for r in raws if r]

    def all_records(self, sid: str) -> list[dict[str, Any]]:
        """Every inbox record of the session, in no order."""
        return [packing.restore_record(v, sid) for v in self.r.hvals(self.k.s(sid, "msgs"))]

    def marks_and_last_arrival(self, sids: list[str]) -> list[tuple[list[str], int]]:
        """For each session, one round trip per node: the marks of its inbox records and
        when its newest queued message came (ms, 0 for none)."""
        pipe = self.pipeline()
        for sid in sids:
            pipe.hvals(self.k.s(sid, "msgs"))
            pipe.xrevrange(self.k.s(sid, "stream"), count=1)
            # A queue the delivery took whole is emptied (queue_trim.lua): its newest
            # entry was the cursor's, or, once both are dropped, the newest record's.
            pipe.get(self.k.s(sid, "cursor"))
        replies = pipe.execute()
        out = []
        for raw, last, cursor in zip(replies[0::3], replies[1::3], replies[2::3], strict=True):
            recs = [json.loads(x) for x in raw]
            marks = [str(r.get("mark")) for r in recs]
            newest = str(last[0][0]) if last else str(cursor or "0-0")
            # A stream id is "<ms>-<seq>": its first part is when the message came.
            at = int(newest.split("-")[0])
            if not at:
                at = max((packing.record_at(r) for r in recs), default=0)
            out.append((marks, at))
        return out

    def new_ids(self, sid: str) -> list[str]:
        """Ids marked ``new`` (not yet carried by a notice), oldest first."""
        return [str(i) for i in self.r.zrange(self.k.s(sid, "new"), 0, -1)]

    def drop_new(self, sid: str, msg_id: str) -> None:
        """Take ``msg_id`` off the new and wake queues (it went out another way)."""
        self.r.zrem(self.k.s(sid, "new"), msg_id)
        self.r.zrem(self.k.s(sid, "wakeq"), msg_id)

    def confirm_notices(self, sid: str, nids: list[str], via: str, now: int) -> int:
        """Confirm notices heard (``via`` socket or drain): their messages move
        ``new → noticed``, each notice once (``floor_drained.lua``). Returns how many."""
        if not nids:
            return 0
        keys = ("floor", "msgs", "carried", "events", "notice", "session")
        return int(self.run("floor_drained", sid, keys, [now, via, *nids]))

    def take_into_inbox(self, sid: str, args: list[Any], *, pipeline: Any = None) -> None:
        """Take messages into ``sid``'s inbox (``ingest.lua``, one call for many; queued on
        ``pipeline`` when given): ``args`` five a message (id, the record as kept, arrival
        ms, ``"1"`` when it may wake, its thread), idempotent."""
        keys = ("msgs", "new", "wakeq", "threads", "events")
        self.run("ingest", sid, keys, args, client=pipeline)

    def append_to_thread(self, thread: str, args: list[Any], *, pipeline: Any = None) -> None:
        """Log messages into ``thread`` (``thread_append.lua``, one call for many, each once;
        queued on ``pipeline`` when given): ``args`` twelve a message, as the script reads."""
        keys = ("meta", "log", "seen")
        self.run_thread("thread_append", thread, keys, args, client=pipeline)

    def sweep_floor_notices(self, sid: str, now: int, grace_ms: int, there: dict[str, bool]) -> int:
        """The floor's unconfirmed notices ``there`` (id -> still on the floor): those a
        drainer took off and never confirmed past ``grace_ms`` give their messages back
        to new (``floor_sweep.lua``); how many were given back."""
        pairs = [x for n, on in there.items() for x in (n, "1" if on else "0")]
        keys = ("floor", "msgs", "new", "wakeq", "events")
        return int(self.run("floor_sweep", sid, keys, [now, grace_ms, *pairs]))

    def answer_turn(self, sid: str, answer: str | None, now: int) -> tuple[list[str], list[str]]:
        """The turn ended with ``answer`` (``None``: none given): the ids it carried and the
        waiting senders' ids, read in one MULTI with the answer's writes
        (``answer_turn.lua``)."""
        pipe = self.pipeline(transaction=True)
        pipe.smembers(self.k.s(sid, "carried"))
        keys = ("carried", "msgs", "ids", "waiters", "events")
        args = [answer or "", now, "1" if answer is not None else "0"]
        self.run("answer_turn", sid, keys, args, client=pipe)
        carried, waiting = pipe.execute()
        return [str(i) for i in carried], [str(w) for w in waiting]

    @store_failed
    def pop_answer(self, client: Any, sid: str, msg_id: str, timeout: float) -> str | None:
        """Block up to ``timeout`` s (``0``: for ever) on ``client``
        (:meth:`~bus.store.store.Store.blocking_client`) for the answer pushed for
        ``msg_id`` (BLPOP, in blocks no longer than the client's read timeout allows):
        its JSON, or ``None``."""
        from .block_chunks import blocks

        for block in blocks(timeout if timeout > 0 else None):
            # Milliseconds: BLPOP takes a decimal timeout; 0 would block for ever.
            got = client.blpop([self.answer_key(sid, msg_id)], timeout=max(0.001, round(block, 3)))
            if got is not None:
                return str(got[1])
        return None

    def queue_mark_read(self, pipe: Any, sid: str, recs: list[dict[str, Any]], now: int) -> None:
        """Queue on ``pipe`` (a :meth:`~bus.store.store.Store.pipeline`): ``recs`` marked read,
        off the new and wake queues (nothing left to notice), one ``inbox_read`` record."""
        for rec in recs:
            rec["mark"] = "read"
            pipe.hset(self.k.s(sid, "msgs"), rec["id"], packing.keep_record(rec, sid))
            pipe.zrem(self.k.s(sid, "new"), rec["id"])
            pipe.zrem(self.k.s(sid, "wakeq"), rec["id"])
        pipe.xadd(
            self.k.s(sid, "events"),
            {"kind": "inbox_read", "at": str(now), "ids": json.dumps([r["id"] for r in recs])},
            maxlen=10000,
            approximate=True,
        )

    def _receipts_alive(
        self, sid: str, msg_ids: list[str], now: int, ttl_ms: int
    ) -> dict[str, int]:
        """Of ``msg_ids`` (answers past ``IDS_KEEP_MS``), those whose receipt in ``ids``
        moved within ``ttl_ms``: id -> the age that makes the prune due when it has not
        (its last transition plus ``ttl_ms``, less ``IDS_KEEP_MS``)."""
        raws = self.r.hmget(self.k.s(sid, "ids"), [receipt_field(i) for i in msg_ids])
        out: dict[str, int] = {}
        for msg_id, raw in zip(msg_ids, raws, strict=True):
            if not raw:
                continue
            try:
                rc = json.loads(raw)
                last = max(v for v in rc.values() if isinstance(v, int | float))
            except (ValueError, AttributeError):
                continue  # torn or foreign: pruned with its answer
            if last + ttl_ms > now:
                out[msg_id] = int(last) + ttl_ms - IDS_KEEP_MS
        return out

    def notice_in_flight(self, sid: str) -> str | None:
        """The id of the notice being built or written; ``None`` when there is none."""
        nid = self.r.hget(self.k.s(sid, "notice"), "id")
        return str(nid) if nid else None

    def floor_notice_ids(self, sid: str) -> list[str]:
        """Notices written to the floor and not yet confirmed heard."""
        return [str(n) for n in self.r.hkeys(self.k.s(sid, "floor"))]

    def prune(self, sid: str, keep: int, now: int, receipt_ttl_ms: int = IDS_KEEP_MS) -> int:
        """Drop send answers older than ``IDS_KEEP_MS`` with their receipts (unless a
        receipt moved within ``receipt_ttl_ms``: both wait for it) and the oldest done
        records past ``keep``; never an unread one. Returns how many records were dropped."""
        r, k = self.r, self.k
        cutoff = now - IDS_KEEP_MS
        # Each stored id's age is in ``threads`` as ``#<id>`` at minus its first-seen ms
        # (append.lua).
        aged = r.zrangebyscore(k.s(sid, "threads"), -cutoff, f"({AGE_SCORE_BELOW}")
        gone = [str(a)[len(AGE_MARK) :] for a in aged if str(a).startswith(AGE_MARK)]
        later = self._receipts_alive(sid, gone, now, receipt_ttl_ms) if gone else {}
        if later:
            # Its age moves on to when the receipt's lifetime ends: pruned then.
            r.zadd(k.s(sid, "threads"), {AGE_MARK + i: -due for i, due in later.items()})
            gone = [i for i in gone if i not in later]
            aged = [a for a in aged if str(a)[len(AGE_MARK) :] not in later]
        if gone:
            r.hdel(k.s(sid, "ids"), *gone, *[receipt_field(i) for i in gone])
        if aged:
            r.zrem(k.s(sid, "threads"), *aged)
        if r.hlen(k.s(sid, "msgs")) <= keep:
            return 0
        recs = sorted(self.all_records(sid), key=lambda x: x["at"])
        done = [x["id"] for x in recs if x["mark"] in GONE_MARKS]
        drop = done[: len(recs) - keep]
        if drop:
            r.hdel(k.s(sid, "msgs"), *drop)
        return len(drop)

    # -- senders waiting for an answer ------------------------------------------------------

    def add_waiter(self, sid: str, msg_id: str) -> None:
        """A sender waits for the answer of the turn that carries ``msg_id``."""
        self.r.sadd(self.k.s(sid, "waiters"), msg_id)

    def drop_waiter(self, sid: str, msg_id: str) -> None:
        """Nobody waits for ``msg_id`` any more."""
        self.r.srem(self.k.s(sid, "waiters"), msg_id)

    def take_waiters(self, sid: str) -> list[str]:
        """Every waiting id, removed (the session closes)."""
        key = self.k.s(sid, "waiters")
        pipe = self.r.pipeline(transaction=True)
        pipe.smembers(key)
        pipe.delete(key)
        return [str(w) for w in pipe.execute()[0]]

    def push_answers(self, sid: str, ids: list[str], answer: dict[str, Any]) -> None:
        """Hand ``answer`` to whoever waits on each id (a list each, kept a day)."""
        if not ids:
            return
        pipe = self.r.pipeline(transaction=True)
        for msg_id in ids:
            key = self.k.answer(sid, msg_id)
            pipe.rpush(key, json.dumps({**answer, "id": msg_id}))
            pipe.expire(key, 86400)
        pipe.execute()

    def answer_key(self, sid: str, msg_id: str) -> str:
        """The list a waiting sender blocks on (BLPOP) for ``msg_id``'s answer."""
        return str(self.k.answer(sid, msg_id))

    # -- threads ---------------------------------------------------------------------------

    def run_thread(
        self, name: str, thread: str, keys: tuple[str, ...], args: list[Any], client: Any = None
    ) -> Any:
        """Run Lua script ``name`` on thread ``thread``'s keys (all in its slot)."""
        return self.script(name)(keys=[self.k.t(thread, n) for n in keys], args=args, client=client)

    def thread_exists(self, thread: str) -> bool:
        """Whether the thread has a record."""
        return bool(self.r.exists(self.k.t(thread, "meta")))

    def thread_meta(self, thread: str) -> dict[str, str]:
        """The thread's record (key, label, parties, senders, counts...); ``{}`` if none."""
        return meta_of(self.r.hgetall(self.k.t(thread, "meta")))

    def thread_metas(self, threads: list[str]) -> list[dict[str, str]]:
        """The records of several threads, one round trip, in order."""
        pipe = self.pipeline()
        for thr in threads:
            pipe.hgetall(self.k.t(thr, "meta"))
        return [meta_of(m) for m in pipe.execute()]

    def thread_field(self, thread: str, name: str) -> str | None:
        """One field of the thread's record; ``None`` if unset."""
        raw = self.r.hget(self.k.t(thread, "meta"), name)
        return str(raw) if raw else None

    def thread_log(self, thread: str) -> list[dict[str, str]]:
        """The thread's log entries, oldest first (``{"id", "m": wire JSON}`` each). A
        one-message thread keeps its message in its record (``thread_append.lua``). The
        record is read before the log: a second message moving it in between leaves it
        in the log, so it is never missed (even on a cluster, without MULTI)."""
        pipe = self.pipeline(transaction=True)
        pipe.hget(self.k.t(thread, "meta"), "one_m")
        pipe.xrange(self.k.t(thread, "log"))
        one_m, rows = pipe.execute()
        # The one message is kept compact (bus.store.packing.keep_thread_message), so is the log's
        # first entry once a second message moved it there.
        if not rows and one_m:
            m = str(one_m)
            return [{"id": packing.thread_message_id(m), "m": packing.restore_thread_message(m)}]
        return [
            {**f, "m": packing.restore_thread_message(f["m"])} if "m" in f else dict(f)
            for _eid, f in rows
        ]

    def threads_of(self, sid: str) -> list[str]:
        """The session's thread ids, newest activity first."""
        key = self.k.s(sid, "threads")
        # Positive scores only: the ids' ages share the key (negative, see prune).
        return [str(t) for t in self.r.zrevrangebyscore(key, "+inf", AGE_SCORE_BELOW)]

    # -- the sender's outbox ------------------------------------------------------------------

    def outbox_page(self, sid: str, start: int, count: int) -> list[str]:
        """``count`` of the session's sent messages from ``start``, newest first, each as
        ``"<recipient>|<message id>"``."""
        return [str(m) for m in self.r.zrevrange(self.k.outbox(sid), start, start + count - 1)]

    def drop_from_outbox(self, sid: str, members: list[str]) -> None:
        """Forget outbox entries whose receipts aged out."""
        if members:
            self.r.zrem(self.k.outbox(sid), *members)

    # -- threads, several at once -----------------------------------------------------------

    def thread_parties_many(self, threads: list[str]) -> list[tuple[Any, bool]]:
        """Each named thread's raw ``parties`` field (``None`` if unset) and whether the
        thread exists, in order."""
        pipe = self.pipeline()
        for thread in threads:
            meta = self.k.t(thread, "meta")
            pipe.hget(meta, "parties")
            pipe.exists(meta)
        got = pipe.execute()
        return [(got[2 * n], bool(got[2 * n + 1])) for n in range(len(threads))]
