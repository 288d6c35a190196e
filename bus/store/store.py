"""The Redis store: session registry, per-session queues, idempotent append, locks.

Each method touches one hash tag (one session, one thread, or one global index), so
every atomic step is one Lua script or one MULTI in one slot. Keys come from
:mod:`bus.store.keys`, which documents each one.

The storage contract: each public method's docstring says what any backend must do,
and ``tests/test_store_contract.py`` holds every backend to it (a standalone Redis and
a Redis Cluster, see :mod:`bus.store.cluster`). Reads of a missing thing answer empty
(``None``, ``[]``, ``0``), never raise.
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import redis

from bus.core.errors import BadInput, RateLimited
from bus.core.models import SessionInfo, check_session_id, now_ms

from . import packing, receipt_index
from .cluster import REDIS_ERRORS, OrderedBatch, is_cluster
from .delivery import DeliveryStore
from .host_claim import HostClaimStore
from .inbox import InboxStore
from .ingest import IngestStore
from .items import ItemStore
from .keys import Keys
from .kick import KickStore
from .many import ManyStore, SweepView, stream_id_after
from .metrics import MetricsStore
from .packing import session_fields, session_from_hash
from .receipts import ReceiptStore
from .redis_errors import unavailable
from .server_config import ConfigStore
from .stream_compact import CompactStore
from .subscriptions import SubsStore

LUA_DIR = Path(__file__).parent / "lua"
BACKLOG_CAP = 10_000
_SCRIPTS = ("append", "unlock", "extend_lock", "take_due")


_INCLUDE = re.compile(r"^--@include (\w+)$", re.M)


def lua_source(name: str) -> str:
    """The text of ``bus/store/lua/<name>.lua`` with each ``--@include <part>`` line replaced by
    ``bus/store/lua/parts/<part>.lua`` (a ``local function`` of its own): a step two scripts
    run (the snapshot in the start and in its own call, the unlock after a notice's
    records) is written once. Redis sees one plain script."""
    text = (LUA_DIR / f"{name}.lua").read_text()
    return _INCLUDE.sub(lambda m: (LUA_DIR / "parts" / f"{m[1]}.lua").read_text().rstrip(), text)


def load_script(client: redis.Redis, name: str) -> Any:
    return client.register_script(lua_source(name))


def inline_script_loads(pipe: Any) -> Any:
    """``pipe`` (a redis-py pipeline) without the round trip redis-py spends on its scripts.

    Before executing a pipeline that holds a script, redis-py sends ``SCRIPT EXISTS`` (and
    ``SCRIPT LOAD`` for a missing one) on its own: one more round trip per pipeline. Here a
    ``SCRIPT LOAD`` of each script goes at the head of the pipeline instead, in the same
    round trip: it loads a script the server lost (a restart) and is a hash lookup when it
    is there. Its replies are taken off, so the caller gets the replies it queued."""
    real_execute = pipe.execute

    def execute(raise_on_error: bool = True) -> Any:
        scripts = list(pipe.scripts)
        if not scripts:
            return real_execute(raise_on_error)
        pipe.scripts = set()
        pipe.command_stack[:0] = [(("SCRIPT LOAD", s.script), {}) for s in scripts]
        return real_execute(raise_on_error)[len(scripts) :]

    pipe.execute = execute
    return pipe


class Store(
    InboxStore,
    IngestStore,
    ItemStore,
    MetricsStore,
    ManyStore,
    ReceiptStore,
    CompactStore,
    DeliveryStore,
    KickStore,
    HostClaimStore,
    ConfigStore,
    SubsStore,
):
    """Redis-backed storage for one bus (one key prefix), on a server or a cluster.

    The inbox and thread records are in :mod:`bus.store.inbox`, items and typed
    request threads in :mod:`bus.store.items`."""

    def __init__(self, client: redis.Redis, keys: Keys, *, lock_ttl_ms: int = 3000) -> None:
        # redis-py's annotations cover bytes and str replies at once; the store always
        # decodes to str, so it talks to the client untyped rather than cast every reply.
        self.r: Any = client
        self.k = keys
        self.lock_ttl_ms = lock_ttl_ms
        self.cluster = is_cluster(client)
        self._sources: dict[str, str] = {}  # SHA -> Lua source, for OrderedBatch
        self._scripts: dict[str, Any] = {}
        for name in _SCRIPTS:
            self.script(name)

    def script(self, name: str) -> Any:
        """The registered Lua script ``bus/store/lua/<name>.lua`` (loaded once, cached)."""
        if name not in self._scripts:
            script = load_script(self.r, name)
            self._sources[script.sha] = script.script
            self._scripts[name] = script
        return self._scripts[name]

    def pipeline(self, transaction: bool = False) -> Any:
        """A pipeline that may also run scripts (``client=`` it); ``transaction`` wraps it
        in MULTI on a standalone server.

        On a cluster, redis-py refuses scripts in a pipeline, so this is an
        :class:`~bus.store.cluster.OrderedBatch`: same calls, same ordered replies, in order but
        not in one MULTI (every caller's keys are in one slot; none relies on isolation
        for correctness, only for fewer interleavings).
        """
        if self.cluster:
            return OrderedBatch(self.r, self._sources)
        return inline_script_loads(self.r.pipeline(transaction=transaction))

    def blocking_client(self) -> Any:
        """The store's server on a client without a read timeout, for BLPOP and XREAD
        BLOCK: the command's own bound holds the wait (see :mod:`bus.store.blocking`); the
        store's own client where its reads already never time out (or on a cluster)."""
        from .blocking import blocking_client

        return blocking_client(self.r)

    def run(
        self, name: str, sid: str, keys: tuple[str, ...], args: list[Any], client: Any = None
    ) -> Any:
        """Run Lua script ``name`` on session ``sid``'s keys (all in the ``{sid}`` slot)."""
        return self.script(name)(keys=self.k.s_many(sid, keys), args=args, client=client)

    def server_time_ms(self) -> int:
        """The store's own clock (Redis ``TIME``), in ms: stream ids are stamped by it."""
        sec, usec = self.r.time()
        return int(sec) * 1000 + int(usec) // 1000

    def last_stream_id(self, sid: str) -> str:
        """The id of the newest entry of the session's queue, ``0-0`` when it has none."""
        rows = self.r.xrevrange(self.k.s(sid, "stream"), count=1)
        return str(rows[0][0]) if rows else "0-0"

    def ping(self) -> None:
        """Return if the backend answers; raise :class:`Unavailable` if it does not."""
        try:
            self.r.ping()
        except REDIS_ERRORS as exc:
            raise unavailable(exc) from exc

    # -- sessions ---------------------------------------------------------------------

    def put_session(self, info: SessionInfo) -> None:
        """Create or replace a session record and index its handle."""
        fields: dict[str, str] = {}
        for name, value in info.model_dump().items():
            if isinstance(value, bool):
                fields[name] = "1" if value else "0"
            elif value is None:
                continue  # unset reads as None; HSETNX (set_delegator_once) needs it absent
            else:
                fields[name] = str(value)
        key = self.k.s(info.session, "session")
        fields, _drop = session_fields(fields)
        pipe = self.r.pipeline(transaction=True)
        pipe.delete(key)
        pipe.hset(key, mapping=fields)
        pipe.execute()
        self.r.zadd(self.k.sessions, {info.session: info.opened_at or now_ms()})
        if info.handle != f"{info.host}:{info.session}":  # a default handle names its session
            self.r.hset(self.k.handle_map(info.handle), info.session, "")

    def get_session(self, sid: str) -> SessionInfo | None:
        """The session record as last put or updated; ``None`` if never put."""
        data = cast(dict[str, str], self.r.hgetall(self.k.s(sid, "session")))
        return session_from_hash(data, sid) if data else None

    def update_session(self, sid: str, **fields: object) -> None:
        """Set some fields of the record (``None`` clears one) and ``updated_at`` to now."""
        mapping: dict[str, str] = {"updated_at": str(now_ms())}
        for name, value in fields.items():
            if isinstance(value, bool):
                mapping[name] = "1" if value else "0"
            else:
                mapping[name] = "" if value is None else str(value)
        mapping, drop = session_fields(mapping)
        key = self.k.s(sid, "session")
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
        pipe = self.r.pipeline(transaction=False)
        for sid in ids:
            pipe.hgetall(self.k.s(sid, "session"))
        return [session_from_hash(d, s) for d, s in zip(pipe.execute(), ids, strict=True) if d]

    def sessions_by_handle(self, handle: str) -> list[SessionInfo]:
        """Sessions whose record carries ``handle`` now, sorted by id: those the handle's
        hash lists, and the session a default handle (``<host>:<sid>``, not listed) names."""
        pipe = self.r.pipeline(transaction=False)
        pipe.hkeys(self.k.handle_map(handle))
        pipe.smembers(self.k.handle(handle))  # sessions opened before the hash
        now, before = pipe.execute()
        named = {str(s) for s in now} | {str(s) for s in before}
        _host, _, name = handle.partition(":")
        with contextlib.suppress(BadInput):
            named.add(check_session_id(name))
        sids = sorted(named)
        found = [self.get_session(sid) for sid in sids]
        return [s for s in found if s is not None and s.handle == handle]

    # -- the queue ----------------------------------------------------------------------

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
    ) -> tuple[bool, str, bool]:
        """Store a message once. Returns (new, answer JSON, dispatch a delivery).

        The first append of ``msg_id`` for ``sid`` adds one stream entry, keeps
        ``answer_json`` as the id's answer, indexes the id's recipient and answers
        ``(True, answer_json, d)``, ``d`` true when no delivery was already pending (the
        dispatch flag is then set). Every later append of the id answers ``(False, the
        first answer, False)`` and writes nothing. With ``max_held`` > 0, a session
        already holding that many messages (queue plus inbox records) refuses it:
        :class:`RateLimited` ``inbox_full``, nothing stored (and no receipt opened).

        One round trip: the append script and the message id's index (another slot,
        idempotent, so it need not be atomic with the append) go in one pipeline, and so
        do the steps ``also`` queues on it after the append (the sender's receipt).
        """
        k = self.k
        now = now_ms()
        pipe = self.pipeline()
        self.run(
            "append",
            sid,
            ("stream", "ids", "threads", "pending", "trim", "events", "msgs"),
            [msg_id, wire_json, answer_json, now, self.lock_ttl_ms, thread, max_held],
            client=pipe,
        )
        receipt_index.index(pipe, k, [(msg_id, sid)], now)
        if also is not None:
            also(pipe)
        new, answer, dispatch = pipe.execute()[0]
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
        return receipt_index.lookup(self.r, self.k, msg_id, now_ms())

    def recipients_of(self, msg_ids: list[str]) -> dict[str, str]:
        """The session each of ``msg_ids`` was appended to, those found (one round trip)."""
        return receipt_index.lookup_many(self.r, self.k, msg_ids, now_ms())

    def mark_pending(self, sid: str) -> bool:
        """Set the dispatch flag; True when the caller should dispatch a delivery."""
        return bool(self.r.set(self.k.s(sid, "pending"), "1", nx=True, px=self.lock_ttl_ms))

    def clear_pending(self, sid: str) -> None:
        """Drop the dispatch flag: the next :meth:`mark_pending` answers True."""
        self.r.delete(self.k.s(sid, "pending"))

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

    def backlog(self, sid: str, cap: int = BACKLOG_CAP) -> int:
        """Messages in the queue that the delivery has not taken yet (counted up to ``cap``).

        The usual answer, 0, costs one round trip: the cursor is the stream's last id.
        """
        pipe = self.r.pipeline(transaction=False)
        pipe.get(self.k.s(sid, "cursor"))
        pipe.xrevrange(self.k.s(sid, "stream"), count=1)
        cursor, last = pipe.execute()
        if not last or (cursor and str(last[0][0]) == cursor):
            return 0
        return len(self.read_after(sid, cursor or "0-0", count=cap))

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

    # -- locks and events ---------------------------------------------------------------

    def lock(self, sid: str) -> str | None:
        """Take the session's delivery lock for ``lock_ttl_ms``: a token, or ``None``
        while another holder's lock has not expired."""
        token = secrets.token_hex(8)
        ok = self.r.set(self.k.s(sid, "lock"), token, nx=True, px=self.lock_ttl_ms)
        return token if ok else None

    def extend_lock(self, sid: str, token: str) -> bool:
        """Keep holding the lock through a long delivery (and a hand-off flag set for it,
        bus.delivery.lock_handoff); False if it was lost."""
        return bool(self.run("extend_lock", sid, ("lock", "again"), [token, self.lock_ttl_ms]))

    def unlock(self, sid: str, token: str) -> None:
        """Release the lock if ``token`` still holds it; another holder's lock stays."""
        self.script("unlock")(keys=[self.k.s(sid, "lock")], args=[token])

    def record(self, sid: str, kind: str, **fields: object) -> None:
        """Append a durability record (``inbox``, ``inbox_noticed``, ...) to the session's log."""
        data = {"kind": kind, "at": str(now_ms())}
        data.update({k: v if isinstance(v, str) else json.dumps(v) for k, v in fields.items()})
        self.r.xadd(self.k.s(sid, "events"), data, maxlen=10000, approximate=True)

    # -- schedule -----------------------------------------------------------------------

    def schedule(self, what: str, sid: str, at_ms: int, *, earliest: bool = True) -> None:
        """Put ``what`` for ``sid`` on the schedule; keep the earlier time if one is there."""
        check_session_id(sid)
        # LT keeps the earlier of two times and still adds a new member.
        pipe = self.pipeline()
        pipe.zadd(self.k.due, {f"{what}|{sid}": at_ms}, lt=earliest)
        # Due soon: a sleeping scheduler wakes for it (in the same round trip).
        self.poke_scheduler(at_ms, pipe=pipe)
        pipe.execute()

    def unschedule(self, what: str, sid: str) -> None:
        """Take ``what`` for ``sid`` off the schedule (nothing if it is not there)."""
        self.r.zrem(self.k.due, f"{what}|{sid}")

    def take_due(self, now: int, limit: int = 500) -> list[tuple[str, str]]:
        """Take up to ``limit`` entries due at ``now`` (ms) or earlier, as ``(what, sid)``,
        removing them atomically: each is returned to exactly one caller."""
        items = self.script("take_due")(keys=[self.k.due], args=[now, limit])
        out = []
        for item in items:
            what, _, sid = str(item).partition("|")
            out.append((what, sid))
        return out

    def next_due(self) -> int | None:
        """The earliest due time on the schedule (ms), ``None`` when it is empty."""
        rows = self.r.zrange(self.k.due, 0, 0, withscores=True)
        return int(rows[0][1]) if rows else None

    def sweep_views(self, sids: list[str]) -> list[tuple[SessionInfo, SweepView]]:
        """:meth:`get_session` and what the backlog sweep looks at (the notice in flight's
        start, whether messages are new, the due and retry times on the schedule, the
        floor's unconfirmed notice records) of many sessions, with whether each has queue
        entries no delivery took (its stream's last id past its cursor), in one
        round trip per node; sessions that do not exist are left out. The backlog sweep
        reads a chunk of sessions this way."""
        pipe = self.r.pipeline(transaction=False)
        for sid in sids:
            pipe.hgetall(self.k.s(sid, "session"))
            pipe.get(self.k.s(sid, "cursor"))
            pipe.xrevrange(self.k.s(sid, "stream"), count=1)
            pipe.hget(self.k.s(sid, "notice"), "at")
            pipe.exists(self.k.s(sid, "new"))
            for what in ("due", "retry"):
                pipe.zscore(self.k.due, f"{what}|{sid}")
            pipe.hvals(self.k.s(sid, "floor"))
        got = pipe.execute()
        out = []
        for n in range(len(sids)):
            data, cursor, last, flight_at, has_new, due_at, retry_at, floor = got[8 * n : 8 * n + 8]
            if not data:
                continue
            view = SweepView(
                backlog=bool(last) and stream_id_after(str(last[0][0]), cursor),
                flight_at=None if flight_at is None else int(flight_at),
                has_new=bool(has_new),
                due_at=None if due_at is None else int(due_at),
                retry_at=None if retry_at is None else int(retry_at),
                floor_records=[str(r) for r in floor],
            )
            out.append((session_from_hash(data, sids[n]), view))
        return out

    # -- heartbeats ---------------------------------------------------------------------

    def beat(self, name: str, fields: dict[str, Any], *, done: bool = False) -> None:
        """Write ``name``'s heartbeat fields (``done``: one more task finished) and list
        the name among those with a heartbeat."""
        key = self.k.beat(name)
        pipe = self.r.pipeline(transaction=False)
        pipe.hset(key, mapping=fields)
        if done:
            pipe.hincrby(key, "done", 1)
        pipe.sadd(self.k.workers, name)
        pipe.execute()

    def beats(self, queue_of: Callable[[str], str | None]) -> list[tuple[str, dict[str, str], int]]:
        """Every heartbeat, by name: ``(name, fields, depth of queue_of(name))``, the depth
        0 where ``queue_of`` names no broker queue; one round trip."""
        names = sorted(str(n) for n in self.r.smembers(self.k.workers))
        pipe = self.r.pipeline(transaction=False)
        queues = [queue_of(name) for name in names]
        for name, queue in zip(names, queues, strict=True):
            pipe.hgetall(self.k.beat(name))
            if queue is not None:
                pipe.llen(self.k.celery_queue(queue))
        replies = iter(pipe.execute() if names else [])
        out = []
        for name, queue in zip(names, queues, strict=True):
            fields = dict(next(replies))
            out.append((name, fields, int(next(replies)) if queue is not None else 0))
        return out

    def claim_sweep(self, every_ms: int, *, what: str = "backlog") -> bool:
        """True for one caller per ``every_ms`` across every process (SET NX PX): the
        backlog sweep (``what="backlog"``), the receipts' expiry pass (``"expiry"``) or
        the short streams' compaction (``"compact"``, :mod:`bus.store.compaction`) then runs once
        an interval, not once per scheduler or pool child."""
        keys = {"backlog": self.k.sweep, "expiry": self.k.expiry_sweep}
        key = keys.get(what) or self.k.compact_sweep
        return bool(self.r.set(key, "1", nx=True, px=every_ms))
