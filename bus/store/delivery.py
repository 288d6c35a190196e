"""The store's delivery side: a delivery's fixed reads and writes in few round trips.

A part of the store's ``delivery`` aggregate (:class:`bus.store.store.Delivery`). A delivery's fixed
reads and writes (the lock, the dispatch flag, the in-flight raw line, the cursor, the
entries, the session record, the send answers, the plan's reads, the unlock and the
hand-off flag) are grouped: one script to
start (:meth:`begin_delivery`), one pipeline for the plan with its fence
(:meth:`delivery_snapshot`), one after the notice's write (:meth:`finish_notice`) and one
to end (:meth:`unlock_and_take_again`). Every step stays in the ``{sid}`` slot.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import NoScriptError

from bus.core.models import SessionInfo, now_ms

from .base import StorePart
from .inbox import view_of_replies
from .schedule import WAKE_TURN
from .session_record import record_info


@dataclass
class DeliveryStart:
    """What :meth:`DeliveryStore.begin_delivery` found, the lock taken.

    ``rows`` is ``None`` when a raw line was in flight (``rawflight``): nothing was read,
    the caller recovers that line first and reads after it."""

    token: str
    sent_at: float  # time.monotonic() before the call: the lease runs at least a TTL from it
    rawflight: dict[str, str] | None
    cursor: str
    rows: list[tuple[str, dict[str, str]]] | None
    info: SessionInfo | None = None
    answers: list[dict[str, Any] | None] = field(default_factory=list)
    # With nothing read and the snapshot asked for (begin_many): the plan's reads, taken
    # in the start's own call.
    snapshot: DeliverySnapshot | None = None


@dataclass
class DeliverySnapshot:
    """The reads the plan after a delivery needs, with the fence, in one round trip."""

    held: bool
    sent_at: float
    info: SessionInfo | None
    notice_id: str | None
    floor_ids: list[str]
    rows: list[tuple[str, dict[str, str]]]
    stream_len: int  # the queue's length (XLEN), for the trim floor
    view: dict[str, int | None]
    # The notice taken into flight in the same call (asked for with a notice id, and the
    # reads showed a running session's steer): notice_take.lua's reply, or None.
    taken: str | None = None


def _flat_hash(flat: list[Any]) -> dict[str, str]:
    return {str(flat[i]): str(flat[i + 1]) for i in range(0, len(flat) - 1, 2)}


def _start_of(reply: Any, token: str, sent_at: float, sid: str) -> DeliveryStart | None:
    """``delivery_begin.lua``'s reply as a :class:`DeliveryStart` (``None``: busy)."""
    if isinstance(reply, str):  # nothing read, the snapshot asked for: [cursor, snapshot]
        cursor, snap = json.loads(reply)
        return DeliveryStart(
            token, sent_at, None, str(cursor), [], snapshot=_snapshot_from(snap, sent_at, sid)
        )
    if not int(reply[0]):
        return None
    _ok, flight, cursor, read, rows, session, answers = reply
    if not int(read):
        return DeliveryStart(token, sent_at, json.loads(flight), str(cursor), None)
    if isinstance(rows, str):  # JSON-encoded by the script when it read any
        rows, answers = json.loads(rows), json.loads(answers)
    entries = [(str(eid), _flat_hash(fields)) for eid, fields in rows]
    data = _flat_hash(session)
    return DeliveryStart(
        token,
        sent_at,
        None,
        str(cursor),
        entries,
        record_info(data, sid) if data else None,
        [json.loads(a) if a else None for a in answers],
    )


def _snapshot_of(reply: str, sent_at: float, sid: str) -> DeliverySnapshot:
    """``delivery_snapshot.lua``'s reply (JSON) as a :class:`DeliverySnapshot`."""
    return _snapshot_from(json.loads(reply), sent_at, sid)


def _snapshot_from(fields: list[Any], sent_at: float, sid: str) -> DeliverySnapshot:
    """parts/snapshot.lua's list, decoded, as a :class:`DeliverySnapshot`."""
    held, session, nid, floor, pending, wake, first, building, retry_at, length, rows = fields[:11]
    taken = fields[11] if len(fields) > 11 and fields[11] else None
    # An empty Lua table encodes as {}: each list read as `or []`.
    session, floor, rows = session or [], floor or [], rows or []
    floor_hash = _flat_hash(floor)
    return DeliverySnapshot(
        held=bool(int(held)),
        sent_at=sent_at,
        info=record_info(_flat_hash(session), sid) if session else None,
        notice_id=str(nid) if nid else None,
        floor_ids=list(floor_hash),
        rows=[(str(eid), _flat_hash(fields)) for eid, fields in rows],
        stream_len=int(length),
        view=view_of_replies(
            pending,
            [("", wake)] if wake else [],
            [("", first)] if first else [],
            building,
            retry_at,
            list(floor_hash.values()),
        ),
        taken=str(taken) if taken else None,
    )


def taken_records(reply: str) -> list[str]:
    """The records of ``notice_take.lua``'s reply with its ``msgs`` key (JSON: the ids
    taken and their inbox records), those that exist, in order."""
    _ids, records = json.loads(reply)
    return [r for r in records or [] if r]


class DeliveryStore(StorePart):
    """A delivery's grouped round trips on a :class:`~bus.store.store.Store`."""

    lock_ttl_ms: int
    # Pipelines of scripts go packed, their replies raw (bus.store.many; execute_loaded is
    # declared on StorePart): the batch's steps over 64 sessions pack hundreds of commands,
    # and redis-py's packing of them would be a large share of a due wake's Python time. (A lost script runs
    # again after the rest: a pipeline whose order matters across scripts and plain
    # commands is not packed.)
    cluster: bool

    def begin_delivery(self, sid: str, count: int) -> DeliveryStart | None:
        """Take the session's delivery lock (as :meth:`~bus.store.store.Store.delivery.lock`) and, in the
        same call, clear the dispatch flag (as :meth:`~bus.store.store.Store.queue.clear_pending`) and
        read what the delivery starts from: the raw line in flight, the cursor, up to
        ``count`` entries after it (as :meth:`~bus.store.store.Store.queue.read_after`), the session
        record and the entries' send answers. ``None`` (nothing touched) while another
        holder's lock has not expired. One round trip (``delivery_begin.lua``)."""
        token = secrets.token_hex(8)
        sent_at = time.monotonic()
        reply = self.script("delivery_begin")(
            keys=self._begin_keys(sid), args=[token, self.lock_ttl_ms, count]
        )
        return _start_of(reply, token, sent_at, sid)

    def _begin_keys(self, sid: str) -> list[str]:
        return self.k.s_many(
            sid, ("lock", "pending", "rawflight", "cursor", "stream", "session", "ids")
        )

    def begin_many(
        self, sids: list[str], count: int, *, snapshot: bool = False
    ) -> list[DeliveryStart | None]:
        """:meth:`begin_delivery` for each of ``sids``, all in one round trip. With
        ``snapshot``, a session with nothing to read comes with its
        :meth:`delivery_snapshot` (``DeliveryStart.snapshot``), taken in the same call."""
        tokens = [secrets.token_hex(8) for _ in sids]
        calls = [
            self.script_call(
                "delivery_begin",
                self._begin_keys(sid) + (self._snapshot_keys(sid) if snapshot else []),
                [token, self.lock_ttl_ms, count],
            )
            for sid, token in zip(sids, tokens, strict=True)
        ]
        sent_at = time.monotonic()
        replies = self.run_scripts(calls)
        return [
            _start_of(r, t, sent_at, sid) for r, t, sid in zip(replies, tokens, sids, strict=True)
        ]

    def delivery_snapshot(
        self,
        sid: str,
        token: str,
        *,
        advance_to: str | None = None,
        read_after: str | None = None,
        count: int = 200,
    ) -> DeliverySnapshot:
        """The fence (as :meth:`~bus.store.store.Store.delivery.extend_lock`) and, in the same round
        trip, the session record, the notice in flight, the floor's unconfirmed notices and
        the plan's view (as :meth:`~bus.store.inbox.InboxStore.inbox_view`) and the
        queue's length once its entries up to the cursor are trimmed (``queue_trim.lua``,
        as :meth:`~bus.store.store.Store.queue.set_trim_floor`). With
        ``advance_to``, first :meth:`~bus.store.store.Store.queue.advance` the cursor to it; with ``read_after``, also up to ``count`` entries
        after that stream id (as :meth:`~bus.store.store.Store.queue.read_after`) in ``rows``. One
        command (``delivery_snapshot.lua``), not one a read: less to pack and parse."""
        sent_at = time.monotonic()
        reply = self.script("delivery_snapshot")(
            keys=self._snapshot_keys(sid),
            args=[token, self.lock_ttl_ms, advance_to or "", read_after or "", count],
        )
        return _snapshot_of(reply, sent_at, sid)

    def snapshot_many(
        self, items: list[tuple[str, str, str | None]], count: int = 200
    ) -> list[DeliverySnapshot]:
        """:meth:`delivery_snapshot` for each ``(sid, token, advance_to)`` of ``items``
        (reading the entries after ``advance_to`` when given), all in one round trip."""
        calls = self._snapshot_calls(items, count)
        sent_at = time.monotonic()
        replies = self.run_scripts(calls)
        return [
            _snapshot_of(reply, sent_at, item[0])
            for reply, item in zip(replies, items, strict=True)
        ]

    def snapshot_many_after(
        self,
        pipe: Any,
        items: list[tuple[str, str, str | None]],
        count: int = 200,
        *,
        takes: list[str | None] | None = None,
        now: int = 0,
        inbox_default: bool = True,
    ) -> list[DeliverySnapshot]:
        """:meth:`snapshot_many` queued behind the writes already on ``pipe`` (a batch's
        messages taken into the inboxes), all sent in one round trip: the snapshots read
        what those writes left. ``takes``: per item, a notice id to take into flight in
        its snapshot's call when the reads show a running session's steer (its
        ``taken``, at ``now`` ms; ``inbox_default``: the inbox is on for a session that
        names no ``agent_inbox``), or None. The writes are idempotent: when a script was lost (a
        ``NOSCRIPT``: the server restarted or flushed them) the scripts are loaded and
        the whole pipeline runs again, in its order. A cluster sends the two apart."""
        calls = self._snapshot_calls(items, count, takes, now, inbox_default)
        if self.cluster:
            self.execute_loaded(pipe)
            sent_at = time.monotonic()
            return [
                _snapshot_of(reply, sent_at, item[0])
                for reply, item in zip(self.run_scripts(calls), items, strict=True)
            ]
        stack = [args for args, _options in pipe.command_stack]
        pipe.reset()
        stack.extend(calls)
        sent_at = time.monotonic()
        replies = self.run_packed(stack)
        if any(isinstance(reply, NoScriptError) for reply in replies):
            shas = list(dict.fromkeys(c[1] for c in stack if c[0] == "EVALSHA"))
            loads = [("SCRIPT", "LOAD", self.io.script_source(sha)) for sha in shas]
            sent_at = time.monotonic()
            replies = self.run_packed(loads + stack)[len(loads) :]
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        tail = replies[len(replies) - len(items) :] if items else []
        return [
            _snapshot_of(reply, sent_at, item[0]) for reply, item in zip(tail, items, strict=True)
        ]

    def _snapshot_calls(
        self,
        items: list[tuple[str, str, str | None]],
        count: int,
        takes: list[str | None] | None = None,
        now: int = 0,
        inbox_default: bool = True,
    ) -> list[tuple[Any, ...]]:
        calls = []
        for n, (sid, token, advance_to) in enumerate(items):
            keys = self._snapshot_keys(sid)
            args: list[Any] = [token, self.lock_ttl_ms, advance_to or "", advance_to or "", count]
            nid = takes[n] if takes else None
            if nid:
                keys += self.k.s_many(sid, ("events", "msgs"))
                args += [nid, now, "1" if inbox_default else ""]
            calls.append(self.script_call("delivery_snapshot", keys, args))
        return calls

    def _snapshot_keys(self, sid: str) -> list[str]:
        names = ("lock", "session", "notice", "floor", "new", "wakeq", "stream", "cursor")
        return self.k.s_many(sid, (*names, "rawflight", "again"))

    def finish_notice(self, sid: str, nid: str, via: str, now: int, **options: Any) -> None:
        """What follows a notice's write (:meth:`finish_calls`, its options), in one round
        trip."""
        self.run_in_order(self.finish_calls(sid, nid, via, now, **options))

    def finish_notices(self, finishes: list[dict[str, Any]]) -> list[tuple[bool, bool]]:
        """What follows each notice's write, for many notices in one round trip, in their
        order: each of ``finishes`` the arguments of :meth:`finish_calls`
        (``sid``, ``nid``, ``via``, ``now`` and its options). Each one's ``(freed,
        again)``: its lock freed and its hand-off flag taken (both false without
        ``unlock``)."""
        calls: list[tuple[Any, ...]] = []
        ends: list[int] = []
        for finish in finishes:
            calls.extend(self.finish_calls(**finish))
            ends.append(len(calls) - 1)
        replies = self.run_in_order(calls) if calls else []
        out = []
        for finish, end in zip(finishes, ends, strict=True):
            reply = replies[end]
            if finish.get("unlock") and isinstance(reply, list):
                out.append((bool(int(reply[0])), bool(int(reply[1]))))
            else:
                out.append((False, False))
        return out

    def finish_calls(
        self,
        sid: str,
        nid: str,
        via: str,
        now: int,
        *,
        heard: bool,
        running: bool = False,
        wake: dict[str, str] | None = None,
        wake_pending: str | None = None,
        unlock: str | None = None,
        turn_due: int | None = None,
        kicks_of: str | None = None,
    ) -> list[tuple[Any, ...]]:
        """What follows a notice's write, as script calls for :meth:`run_in_order` (a
        batch's notices go with other sessions', bus.delivery.engine), the last one's reply
        ``[freed, again]``: one ``notice_finish.lua`` call. ``heard`` (a socket's ack)
        confirms it first (parts/drained.lua, as ``floor_drained.lua`` and
        :meth:`~bus.store.inbox.InboxStore.confirm_notices`), else it is recorded written
        (as ``notice_done.lua``); then the session's ``retry_at`` dropped, ``running`` sets
        its state so, ``wake`` appends a ``wake`` record with those fields,
        ``wake_pending``: the notice whose wake command is about to run (:meth:`wake_done`
        clears it); ``unlock``: the lock token, the lock freed and the hand-off flag taken
        last (as :meth:`unlock_and_take_again`); ``turn_due``: the wake's turn entry put on
        the schedule for then (ms), replacing an earlier wake's (a ``ZADD`` before the
        script); ``kicks_of``: with ``unlock``, the session is pushed onto that host's kick
        list when it must run again (its hand-off flag taken, or its lock no longer ours),
        for a caller that reads the reply late (a standalone server's: the list is in
        another slot). A due wake's notice is one call (two with ``turn_due``)."""
        fields = [x for pair in (wake or {}).items() for x in pair]
        names = ("notice", "msgs", "carried", "floor", "events", "session", "lock", "again")
        keys = self.k.s_many(sid, names)
        if kicks_of is not None:
            keys.append(self.k.kick_list(kicks_of))
        finish = self.script_call(
            "notice_finish",
            keys,
            [
                nid,
                now,
                via,
                "heard" if heard else "1",
                str(now_ms()),
                "1" if running else "",
                wake_pending or "",
                unlock or "",
                sid if kicks_of is not None and unlock else "",
                *fields,
            ],
        )
        # Before the finish: the last call's reply is the finish's.
        calls: list[tuple[Any, ...]] = []
        if turn_due is not None:
            calls.append(("ZADD", self.k.due, turn_due, f"{WAKE_TURN}|{sid}"))
        calls.append(finish)
        return calls

    def take_notices(self, items: list[tuple[str, str]], now: int) -> list[Any]:
        """Start the notice in flight ``nid`` for each ``(sid, nid)``, taking every new id
        into it (``notice_take.lua``), all in one round trip: each one's reply, the ids and
        their records (:func:`taken_records`), falsy when a notice was already in flight or
        nothing was new."""
        names = ("notice", "new", "wakeq", "events", "msgs")
        return self.run_scripts(
            [
                self.script_call("notice_take", self.k.s_many(sid, names), [nid, now])
                for sid, nid in items
            ]
        )

    def revert_notice(
        self,
        sid: str,
        nid: str,
        now: int,
        reason: str,
        *,
        pipeline: Any = None,
        again: bool = False,
    ) -> None:
        """The notice in flight ``nid`` did not go in: its ids back to new (and to the wake
        queue), a ``notice_reverted`` record with ``reason`` (``notice_revert.lua``);
        nothing when ``nid`` is not the one in flight. ``again``: it may have been heard
        (a worker killed after its write), so its records are marked to be listed as
        redelivered by the next notice."""
        names = ("notice", "new", "wakeq", "events", *(("msgs",) if again else ()))
        args = [nid, now, reason, *(("1",) if again else ())]
        self.script("notice_revert")(keys=self.k.s_many(sid, names), args=args, client=pipeline)

    def notice_written(
        self, sid: str, nid: str, now: int, via: str, *, pipeline: Any = None
    ) -> None:
        """The notice in flight ``nid`` is on the floor (``via`` ``file``): recorded written,
        waiting for a drain to confirm it (``notice_done.lua``); nothing when ``nid`` is
        not the one in flight."""
        keys = self.k.s_many(sid, ("notice", "msgs", "carried", "floor", "events"))
        self.script("notice_done")(keys=keys, args=[nid, now, via], client=pipeline)

    def floor_woken(self, sid: str, now: int) -> list[str]:
        """Mark the floor's unconfirmed notices that no drain took as woken, once each
        (``floor_woken.lua``): the ids of those marked."""
        got = self.script("floor_woken")(keys=[self.k.s(sid, "floor")], args=[now])
        return [str(n) for n in got or []]

    def wake_done(self, sid: str, nid: str, reason: str) -> None:
        """The wake command for notice ``nid`` ran: its ``wake`` record and the session's
        ``wake_pending`` cleared, one round trip."""
        pipe = self.pipeline()
        record = {"kind": "wake", "at": str(now_ms()), "notice": nid, "reason": reason}
        pipe.xadd(self.k.s(sid, "events"), record, maxlen=10000, approximate=True)
        pipe.hdel(self.k.s(sid, "session"), "wake_pending")
        pipe.execute()
