"""The store's sessions: each session's record and the registry of them, by id and by handle.

A part of :class:`~bus.store.store.Store` (one class per aggregate). The record is the
hash ``P:{sid}:session``; the registry a sorted set by ``opened_at`` and one hash of
sessions per handle. Reads of a missing session answer empty.
"""

from __future__ import annotations

import contextlib
from typing import cast

from bus.core.errors import BadInput
from bus.core.ids import is_session_id
from bus.core.models import SessionInfo, check_session_id, now_ms

from .base import StorePart
from .session_record import as_read, default_handle, record_info, stored


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
