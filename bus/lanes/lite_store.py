"""The store's reads for the read commands' lane, without redis-py.

:class:`LiteStore` is the store's own read methods (its backlog, heartbeat, inbox, item,
receipt, host claim and server config parts, unchanged) on :class:`LiteClient`, the few
redis-py calls they make spoken over :mod:`bus.lanes.resp`, plus the session reads
:class:`~bus.store.store.Store` makes itself, with a session record as a dict of
:class:`~bus.core.models.SessionInfo`'s fields (:func:`bus.store.session_record.record_row`)
instead of the model. Read only: nothing here writes. bus.lanes.read_answers renders what
these answer.
"""

from __future__ import annotations

from collections.abc import Callable

from bus.store import receipt_index
from bus.store.backlogs import BacklogStore
from bus.store.beats import BeatStore
from bus.store.host_claim import HostClaimStore
from bus.store.inbox import InboxStore
from bus.store.items import ItemStore
from bus.store.keys import Keys
from bus.store.members import MemberStore
from bus.store.receipts import ReceiptStore
from bus.store.server_config import ConfigStore
from bus.store.session_record import record_row
from bus.store.write_fault import WriteFaultStore

from .resp import Connection

# Not ``typing.TYPE_CHECKING``: importing typing alone costs the read lane several ms
# (bus.lanes.read imports this module).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def _pairs(reply: list[Any] | None) -> dict[str, Any]:
    items = reply or []
    return dict(zip(items[0::2], items[1::2], strict=True))


def _entries(reply: list[Any] | None) -> list[tuple[str, dict[str, Any]]]:
    return [(str(eid), _pairs(fields)) for eid, fields in reply or []]


def _same(reply: Any) -> Any:
    return reply


def _listed(reply: Any) -> list[Any]:
    return list(reply or [])


# redis-py's answer for each command's reply (``decode_responses=True``).
_SHAPES: dict[str, Callable[[Any], Any]] = {
    "HGETALL": _pairs,
    "XRANGE": _entries,
    "XREVRANGE": _entries,
    "SMEMBERS": lambda reply: set(reply or []),
    "HMGET": _listed,
    "HVALS": _listed,
    "LRANGE": _listed,
    "ZRANGE": _listed,
    "ZREVRANGE": _listed,
    "ZREVRANGEBYSCORE": _listed,
}


class _Calls:
    """redis-py's spelling of the read commands the store's parts make; ``_do`` runs one."""

    def _do(self, *args: Any) -> Any:
        raise NotImplementedError

    def get(self, name: str) -> Any:
        return self._do("GET", name)

    def exists(self, *names: str) -> Any:
        return self._do("EXISTS", *names)

    def hget(self, name: str, key: str) -> Any:
        return self._do("HGET", name, key)

    def hgetall(self, name: str) -> Any:
        return self._do("HGETALL", name)

    def hmget(self, name: str, keys: list[str] | str, *args: str) -> Any:
        # As redis-py: one field name given alone is a field, not its letters.
        return self._do("HMGET", name, *([keys] if isinstance(keys, str) else keys), *args)

    def hvals(self, name: str) -> Any:
        return self._do("HVALS", name)

    def hexists(self, name: str, key: str) -> Any:
        return self._do("HEXISTS", name, key)

    def smembers(self, name: str) -> Any:
        return self._do("SMEMBERS", name)

    def llen(self, name: str) -> Any:
        return self._do("LLEN", name)

    def lrange(self, name: str, start: int, end: int) -> Any:
        return self._do("LRANGE", name, start, end)

    def zrange(self, name: str, start: int, end: int) -> Any:
        return self._do("ZRANGE", name, start, end)

    def zrevrange(self, name: str, start: int, end: int) -> Any:
        return self._do("ZREVRANGE", name, start, end)

    def zrevrangebyscore(self, name: str, max: Any, min: Any) -> Any:
        return self._do("ZREVRANGEBYSCORE", name, max, min)

    def xrange(self, name: str, min: str = "-", max: str = "+", count: int | None = None) -> Any:
        return self._do("XRANGE", name, min, max, *(("COUNT", count) if count else ()))

    def info(self, section: str) -> dict[str, str]:
        """INFO's ``key:value`` lines as a dict (the values as text)."""
        text = self._do("INFO", section)
        if isinstance(text, bytes):
            text = text.decode()
        pairs = (ln.split(":", 1) for ln in str(text or "").splitlines() if ":" in ln)
        return {k: v for k, v in pairs}

    def config_get(self, name: str) -> dict[str, str]:
        reply = self._do("CONFIG", "GET", name)
        return _pairs(reply) if isinstance(reply, list) else {}

    def xrevrange(
        self,
        name: str,
        max: str = "+",
        min: str = "-",
        count: int | None = None,
    ) -> Any:
        return self._do("XREVRANGE", name, max, min, *(("COUNT", count) if count else ()))


class LitePipeline(_Calls):
    """Commands queued, sent in one write by :meth:`execute` (their replies in order)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.commands: list[tuple[Any, ...]] = []

    def _do(self, *args: Any) -> LitePipeline:
        self.commands.append(args)
        return self

    def execute(self) -> list[Any]:
        replies = self.conn.pipeline(self.commands)
        shapes = [_SHAPES.get(str(c[0]), _same) for c in self.commands]
        self.commands = []
        return [shape(reply) for shape, reply in zip(shapes, replies, strict=True)]


class LiteClient(_Calls):
    """The subset of redis-py's client the store's read methods use, on one connection."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def _do(self, *args: Any) -> Any:
        return _SHAPES.get(str(args[0]), _same)(self.conn.call(*args))

    def pipeline(self, transaction: bool = False) -> LitePipeline:
        # Reads only: each reader that pipelines is written to hold without MULTI (a
        # cluster has none), so the pipeline is sent as it is, in order.
        return LitePipeline(self.conn)


class LiteStore(
    BacklogStore,
    BeatStore,
    InboxStore,
    MemberStore,
    ItemStore,
    ReceiptStore,
    HostClaimStore,
    ConfigStore,
    WriteFaultStore,
):
    """The store's reads on a :class:`LiteClient`; sessions as dicts (``record_row``)."""

    def __init__(self, conn: Connection, keys: Keys) -> None:
        self.r = LiteClient(conn)
        self.k = keys

    def pipeline(self, transaction: bool = False) -> LitePipeline:
        return self.r.pipeline(transaction)

    def script(self, name: str) -> Any:
        raise TypeError(f"the read lane runs no script ({name})")

    # -- the sessions bus.store.store.Store reads itself (the same commands) ---------------

    def get_session(self, sid: str) -> dict[str, Any] | None:
        """The session record's fields (``record_row``); ``None`` if never put."""
        data = self.r.hgetall(self.k.s(sid, "session"))
        return record_row(data, sid) if data else None

    def sessions(self) -> list[dict[str, Any]]:
        """Every session's record, oldest ``opened_at`` first (one round trip)."""
        ids = [str(s) for s in self.r.zrange(self.k.sessions, 0, -1)]
        pipe = self.r.pipeline()
        for sid in ids:
            pipe.hgetall(self.k.s(sid, "session"))
        return [record_row(d, s) for d, s in zip(pipe.execute(), ids, strict=True) if d]

    def recipient_of(self, msg_id: str, now_ms: int) -> str | None:
        """The session ``msg_id`` was appended to (kept 7 days); ``None`` if unknown."""
        return receipt_index.lookup(self.r, self.k, msg_id, now_ms)


__all__ = ["LiteClient", "LitePipeline", "LiteStore"]
