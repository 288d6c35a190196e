"""The store's sessions: each session's record and the registry of them, by id and by handle.

A part of the store's ``sessions`` aggregate (:class:`bus.store.store.Sessions`). The record is the
hash ``P:{sid}:session``; the registry a sorted set by ``opened_at`` and one hash of
sessions per handle. Reads of a missing session answer empty.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, cast

from bus.core.errors import BadInput
from bus.core.ids import is_session_id
from bus.core.models import SessionInfo, check_session_id, now_ms

from .base import StorePart
from .session_record import as_read, default_handle, record_info, stored

# A lanes index entry whose session's record names another parent (or none) is taken out
# by a lookup once it is this old, in ms: a younger one may be a session being opened now,
# its index entry written and its record not yet.
LANE_SETTLE_MS = 60_000


class SessionStore(StorePart):
    """Session records and their registry."""

    def put_session(self, info: SessionInfo) -> None:
        """Create or replace a session record and index its handle and its parent's lane."""
        fields: dict[str, str] = {}
        for name, value in info.model_dump().items():
            if isinstance(value, bool):
                fields[name] = "1" if value else "0"
            elif value is None:
                continue  # unset reads as None; HSETNX (set_delegator_once) needs it absent
            else:
                fields[name] = str(value)
        key = self.k.s(info.session, "session")
        fields, _drop = stored(fields, info.session)
        if is_session_id(info.parent):
            # A parent that is no session id (a handle, say) has no lanes index: a lanes
            # lookup is by session id. The parent's lanes first (another slot than the record), stamped now: a
            # lookup checks each entry against the record and leaves a fresh one that
            # disagrees (its record may be on its way) in the index.
            self.r.zadd(self.k.lanes(info.parent), {info.session: now_ms()})
        pipe = self.r.pipeline(transaction=True)
        pipe.delete(key)
        pipe.hset(key, mapping=fields)
        pipe.execute()
        self.r.zadd(self.k.sessions, {info.session: info.opened_at or now_ms()})
        if info.handle != default_handle(info.host, info.session):  # it names its session
            self.r.hset(self.k.handle_map(info.handle), info.session, "")

    def get_session(self, sid: str) -> SessionInfo | None:
        """The session record as last put or updated; ``None`` if never put."""
        data = cast(dict[str, str], self.r.hgetall(self.k.s(sid, "session")))
        return record_info(data, sid) if data else None

    def update_session(self, sid: str, **fields: object) -> None:
        """Set some fields of the record (``None`` clears one) and ``updated_at`` to now."""
        mapping: dict[str, str] = {"updated_at": str(now_ms())}
        for name, value in fields.items():
            if isinstance(value, bool):
                mapping[name] = "1" if value else "0"
            else:
                mapping[name] = "" if value is None else str(value)
        key = self.k.s(sid, "session")
        if "host" in mapping or "handle" in mapping:
            # A default handle is judged against the host: the record's, unless set here.
            was = as_read(cast(dict[str, str], self.r.hgetall(key)), sid)
            for name in ("host", "handle"):
                if name not in mapping and name in was:
                    mapping[name] = was[name]
        mapping, drop = stored(mapping, sid)
        if is_session_id(mapping.get("parent")):
            self.r.zadd(self.k.lanes(mapping["parent"]), {sid: now_ms()})  # as put_session
        if not drop:
            self.r.hset(key, mapping=mapping)
            return
        pipe = self.pipeline(transaction=True)
        pipe.hset(key, mapping=mapping)
        pipe.hdel(key, *drop)
        pipe.execute()

    def incr_turns(self, sid: str) -> int:
        """Add one to the session's turn count atomically; return the new count."""
        return int(self.r.hincrby(self.k.s(sid, "session"), "turns", 1))

    def session_ids(self) -> list[str]:
        """Every session ever put, oldest ``opened_at`` first."""
        return [str(s) for s in self.r.zrange(self.k.sessions, 0, -1)]

    def sessions(self) -> list[SessionInfo]:
        """The records of :meth:`session_ids`, in that order (one round trip per node)."""
        ids = self.session_ids()
        pipe = self.pipeline()
        for sid in ids:
            pipe.hgetall(self.k.s(sid, "session"))
        return [record_info(d, s) for d, s in zip(pipe.execute(), ids, strict=True) if d]

    def index_skeleton(self, skeleton: str, sid: str) -> None:
        """List ``sid`` under its handle's confusable ``skeleton`` (a handle not ASCII)."""
        self.r.hset(self.k.skeleton_map(skeleton), sid, "")

    def sessions_by_skeleton(self, skeleton: str) -> list[SessionInfo]:
        """The sessions :meth:`index_skeleton` listed under ``skeleton``, as they are now."""
        sids = sorted(str(s) for s in self.r.hkeys(self.k.skeleton_map(skeleton)))
        found = [self.get_session(sid) for sid in sids]
        return [s for s in found if s is not None]

    def sessions_by_handle(self, handle: str) -> list[SessionInfo]:
        """Sessions whose record carries ``handle`` now, sorted by id: those the handle's
        hash lists, and the session a default handle (``<host>:<sid>``, not listed) names."""
        named = {str(s) for s in self.r.hkeys(self.k.handle_map(handle))}
        _host, _, name = handle.rpartition(":")  # a session id has no colon
        with contextlib.suppress(BadInput):
            named.add(check_session_id(name))
        sids = sorted(named)
        found = [self.get_session(sid) for sid in sids]
        return [s for s in found if s is not None and s.handle == handle]

    def touch_seen(self, sid: str, at_ms: int) -> None:
        """Set ``last_seen`` of an existing session record; never make a record."""
        key = self.k.s(sid, "session")
        if self.r.exists(key):
            self.r.hset(key, "last_seen", str(at_ms))

    def last_seen(self, sid: str) -> int | None:
        """The session's ``last_seen`` (ms); ``None`` if never set."""
        seen = self.r.hget(self.k.s(sid, "session"), "last_seen")
        return int(seen) if seen else None

    def set_delegator_once(self, sid: str, giver: str) -> bool:
        """Record ``giver`` as the session's delegator unless one is recorded (HSETNX);
        True when this call set it."""
        return bool(self.r.hsetnx(self.k.s(sid, "session"), "delegator", giver))

    def clear_retry(self, sid: str) -> None:
        """Drop the session's ``retry_at`` (a refused notice may be tried again now)."""
        self.r.hdel(self.k.s(sid, "session"), "retry_at")

    def add_gave(self, giver: str, to: str) -> None:
        """Remember that session ``giver`` gave session ``to`` work."""
        self.r.sadd(self.k.s(giver, "gave"), to)

    def gave(self, giver: str, to: str) -> bool:
        """Whether :meth:`add_gave` recorded ``giver`` giving ``to`` work."""
        return bool(self.r.sismember(self.k.s(giver, "gave"), to))

    def gave_and_session(self, giver: str, to: str) -> tuple[bool, Any]:
        """:meth:`gave` and ``to``'s session record (as :meth:`~bus.store.store.Store.sessions.get_session`:
        a ``SessionInfo`` or ``None``) in one round trip: a delivery's wake rules for a
        sender that names its session (bus.delivery.inbox), one trip on a lone send's path."""
        pipe = self.pipeline()
        pipe.sismember(self.k.s(giver, "gave"), to)
        pipe.hgetall(self.k.s(to, "session"))
        gave, data = pipe.execute()
        return bool(gave), (record_info(data, to) if data else None)

    def session_and_gave(self, sid: str, sender: str) -> tuple[Any, bool, str | None]:
        """``sid``'s session record (as :meth:`~bus.store.store.Store.sessions.get_session`), whether
        :meth:`gave` records ``sid`` giving ``sender`` work, and ``sender``'s parent, in one
        round trip: a send from a session carries its receiver's wake fact about it
        (bus.services.routing), so the delivery looks nothing up for it."""
        pipe = self.pipeline()
        pipe.hgetall(self.k.s(sid, "session"))
        pipe.sismember(self.k.s(sid, "gave"), sender)
        pipe.hget(self.k.s(sender, "session"), "parent")
        data, gave, parent = pipe.execute()
        return (record_info(data, sid) if data else None), bool(gave), parent or None

    def gave_to(self, sid: str) -> list[str]:
        """The sessions ``sid`` gave work to (its ``gave`` set)."""
        return sorted(str(s) for s in self.r.smembers(self.k.s(sid, "gave")))

    def session_parents(self, sids: list[str]) -> list[str | None]:
        """Each session's ``parent`` field, in order (``None``: none, or no session), one
        round trip per node: a field a session, not its whole record."""
        pipe = self.pipeline()
        for sid in sids:
            pipe.hget(self.k.s(sid, "session"), "parent")
        return [str(p) if p else None for p in pipe.execute()]

    def lanes_of(self, parent: str) -> list[str]:
        """The sessions whose ``parent`` is ``parent`` now, sorted: the entries of its
        lanes index, each checked against its record's ``parent``. An entry that
        disagrees (its session gone or given another parent) is taken out once it is
        :data:`LANE_SETTLE_MS` old (a younger one's record may still be on its way: the
        index is written first). Two round trips and a field a lane, whatever the number
        of other sessions; the first lookup of a bus indexes the sessions opened before
        the index (:meth:`index_lanes`)."""
        key = self.k.lanes(parent)
        pipe = self.pipeline()
        pipe.exists(self.k.lanes_indexed)
        pipe.zrange(key, 0, -1, withscores=True)
        indexed, entries = pipe.execute()
        if not indexed:
            self.index_lanes()
            entries = self.r.zrange(key, 0, -1, withscores=True)
        stamped = sorted((str(sid), int(at)) for sid, at in entries)
        parents = self.session_parents([sid for sid, _at in stamped])
        settled = int(time.time() * 1000) - LANE_SETTLE_MS
        stale = [
            sid
            for (sid, at), p in zip(stamped, parents, strict=True)
            if p != parent and at <= settled
        ]
        if stale:
            self.r.zrem(key, *stale)
        return [sid for (sid, _at), p in zip(stamped, parents, strict=True) if p == parent]

    def index_lanes(self) -> None:
        """Put every registered session with a parent in its parent's lanes index, then
        mark the bus indexed: for the sessions opened before the index (their open wrote
        none). Reads every session's ``parent``: once."""
        ids = self.session_ids()
        pipe = self.pipeline()
        for sid, parent in zip(ids, self.session_parents(ids), strict=True):
            if is_session_id(parent):  # as put_session indexes
                pipe.zadd(self.k.lanes(parent), {sid: 0}, nx=True)
        pipe.set(self.k.lanes_indexed, "1")
        pipe.execute()
