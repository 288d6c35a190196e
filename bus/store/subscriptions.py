"""The store's durable subscriptions (bus/services/durable_watch.py): a cursor per followed session.

A part of the store's ``events`` aggregate (:class:`bus.store.store.Events`). Each cursor sits in its session's slot
(``P:{sid}:subs``), beside the ``events`` stream it points into, as
``<events id>|<ms of its last use>``: a cursor unused for ``INBOX_SUB_IDLE_S`` keeps the
session's events no longer (``events_quiet.lua``), and one whose records were dropped so
is ``gone`` (its subscription refused ``cursor_expired``).
"""

from __future__ import annotations

import json
import threading
from typing import Any

from bus.core.models import now_ms

from .base import StorePart
from .cluster import Poll, read_streams

# A cursor whose records the compaction pass dropped while it was unused (events_quiet.lua).
GONE = "gone"


def cursor_of(raw: str | None) -> str | None:
    """The events id a stored cursor names (``<id>|<ms>``; an older one is the bare id)."""
    return raw.partition("|")[0] if raw else None


class SubsStore(StorePart):
    """Open, read, move and reset a durable subscription's cursors."""

    def check_sub_name(self, name: str) -> str:
        """``name`` if it may name a subscription; ``BadInput`` otherwise."""
        self.k.sub(name)
        return name

    def read_session_streams(
        self,
        client: Any,
        positions: dict[str, str],
        *,
        stream: str,
        count: int,
        block_ms: int,
        stop: threading.Event,
        poll: Poll | None = None,
    ) -> list[tuple[str, list[tuple[str, dict[str, str]]]]]:
        """New entries after each session's position in its ``stream`` (``stream``: the
        messages addressed to it; ``events``: its durability records), read on ``client``
        (one that may block): ``[(sid, entries)]`` (:func:`bus.store.cluster.read_streams`;
        ``poll``: a watch's wait between reads on a cluster, kept across calls)."""
        if stream not in ("stream", "events"):
            raise ValueError(f"no session stream {stream!r}")
        sid_of = {self.k.s(sid, stream): sid for sid in positions}
        keyed = {key: positions[sid] for key, sid in sid_of.items()}
        rows = read_streams(client, keyed, count=count, block_ms=block_ms, stop=stop, poll=poll)
        return [(sid_of[key], entries) for key, entries in rows]

    def has_event(self, sid: str, event_id: str) -> bool:
        """Whether the session's ``events`` stream still holds the record ``event_id``."""
        return bool(self.r.xrange(self.k.s(sid, "events"), event_id, event_id))

    def sub_open(self, name: str, now: int, idle_ms: int = 0) -> int:
        """The subscription's creation time (ms), made now if it is new; with ``idle_ms``
        its record expires that long after its last open."""
        key = self.k.sub(name)
        pipe = self.pipeline(transaction=True)
        pipe.hsetnx(key, "created", now)
        pipe.hget(key, "created")
        if idle_ms:
            pipe.pexpire(key, idle_ms)
        created = pipe.execute()[1]
        return int(created or now)

    def sub_claim(self, reader: str, name: str, now: int, idle_ms: int, most: int) -> bool:
        """Reader ``reader`` uses its subscription ``name`` now: False when it is new and
        the reader holds ``most`` in use already (``sub_claim.lua``)."""
        keys = [self.k.reader_subs(reader)]
        return bool(self.script("sub_claim")(keys=keys, args=[name, now, idle_ms, most]))

    def sub_cursors(self, name: str, sids: list[str]) -> dict[str, str | None]:
        """Each session's cursor of subscription ``name`` (``None``: none yet)."""
        self.k.sub(name)  # the name checked
        pipe = self.pipeline()
        for sid in sids:
            pipe.hget(self.k.s(sid, "subs"), name)
        got = pipe.execute()
        return {sid: cursor_of(str(c) if c else None) for sid, c in zip(sids, got, strict=True)}

    def sub_commit(self, name: str, cursors: dict[str, str]) -> None:
        """Move subscription ``name``'s cursors, each marked used now (one round trip
        per node)."""
        if not cursors:
            return
        at = now_ms()
        pipe = self.pipeline()
        for sid, cursor in cursors.items():
            pipe.hset(self.k.s(sid, "subs"), name, f"{cursor}|{at}")
        pipe.execute()

    def sub_reset(self, name: str, sids: list[str]) -> None:
        """Forget subscription ``name`` (its record, its cursors on ``sids``)."""
        pipe = self.pipeline()
        pipe.delete(self.k.sub(name))
        for sid in sids:
            pipe.hdel(self.k.s(sid, "subs"), name)
        pipe.execute()

    def events_bounds(self, sid: str) -> dict[str, Any] | None:
        """The session's ``events`` stream: its first and last ids and the newest id
        trimmed from it (``max-deleted-entry-id``); ``None`` when it has none."""
        key = self.k.s(sid, "events")
        if not self.r.exists(key):
            return None
        info = self.r.xinfo_stream(key)
        first = info.get("first-entry")
        return {
            "first": str(first[0]) if first else None,
            "last": str(info.get("last-generated-id") or "0-0"),
            "max_deleted": str(info.get("max-deleted-entry-id") or "0-0"),
        }

    def record(self, sid: str, kind: str, **fields: object) -> None:
        """Append a durability record (``inbox``, ``inbox_noticed``, ...) to the session's log."""
        data = {"kind": kind, "at": str(now_ms())}
        data.update({k: v if isinstance(v, str) else json.dumps(v) for k, v in fields.items()})
        self.r.xadd(self.k.s(sid, "events"), data, maxlen=10000, approximate=True)

    def last_event_id(self, sid: str) -> str:
        """The id of the session's newest durability record, ``0-0`` when it has none."""
        last = self.r.xrevrange(self.k.s(sid, "events"), count=1)
        return str(last[0][0]) if last else "0-0"

    def wait_event(self, client: Any, sid: str, cursor: str, block_ms: int) -> str | None:
        """Block on ``client`` (one that may block) up to ``block_ms`` (at most one
        :data:`~bus.store.block_chunks.BLOCK_CHUNK_S` block: the caller loops) for a record of
        the session's ``events`` stream after ``cursor``: the newest id read, ``None`` if
        none came."""
        from .block_chunks import BLOCK_CHUNK_S

        block = max(1, min(block_ms, int(BLOCK_CHUNK_S * 1000)))
        got = client.xread({self.k.s(sid, "events"): cursor}, block=block)
        if isinstance(got, dict):  # RESP3 answers a dict key -> entries
            entries = next(iter(got.values()), None)
            entries = entries[0] if entries and isinstance(entries[0], list) else entries
        else:
            entries = got[0][1] if got else None
        return str(entries[-1][0]) if entries else None

    def waiting_client(self, block_s: float, name: str) -> tuple[Any, Any]:
        """``(client, pool)``: a connection whose socket timeout outlasts a ``block_s``
        blocking read (the shared client's may be shorter), on a pool of its own the caller
        disconnects (on a cluster, a cluster client of its own and its pools).
        ``name`` shows in ``CLIENT LIST``: who is waiting for what."""
        from .blocking import outlasting, own_client

        return own_client(self.r, socket_timeout=outlasting(self.r, block_s), name=name)

    def wait_events(self, client: Any, sid: str, after: str, block_ms: int) -> str | None:
        """Block up to ``block_ms`` on ``client`` (:meth:`waiting_client`) for records of
        ``sid``'s events stream after id ``after`` (XREAD BLOCK): the newest one's id, or
        ``None`` when none came."""
        got = client.xread({self.k.s(sid, "events"): after}, count=100, block=block_ms)
        return str(got[0][1][-1][0]) if got else None
