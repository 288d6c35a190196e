"""The Redis store: session registry, per-session queues, idempotent append, locks.

On a cluster each atomic step (one Lua script or one MULTI) touches one hash tag (one
session, one thread, one host's kick list, or one global index), so it runs in one slot;
on a standalone server a few scripts take keys of more tags in one call (the lua-one-slot
decision record names them). Keys come from
:mod:`bus.store.keys`, which documents each one.

The storage contract: each public method's docstring says what any backend must do,
and ``tests/contract/test_store_contract.py`` holds every backend to it (a standalone Redis and
a Redis Cluster, see :mod:`bus.store.cluster`). Reads of a missing thing answer empty
(``None``, ``[]``, ``0``), never raise.
"""

from __future__ import annotations

from typing import Any

import redis

from .backlogs import BacklogStore
from .beats import BeatStore
from .cluster import REDIS_ERRORS, OrderedBatch, is_cluster
from .conversations import ConversationStore
from .delivery import DeliveryStore
from .durable import DurableStore
from .host_claim import HostClaimStore
from .inbox import InboxStore
from .ingest import IngestStore
from .items import ItemStore
from .keys import Keys
from .kick import KickStore
from .locks import LockStore
from .lua_files import lua_source
from .many import ManyStore
from .metrics import MetricsStore
from .queue import QueueStore
from .receipts import ReceiptStore
from .redis_errors import unavailable
from .schedule import ScheduleStore
from .server_config import ConfigStore
from .sessions import SessionStore
from .stream_compact import CompactStore
from .subscriptions import SubsStore

_SCRIPTS = ("append", "unlock", "extend_lock", "take_due")


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
    SessionStore,
    QueueStore,
    BacklogStore,
    LockStore,
    ScheduleStore,
    BeatStore,
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
    ConversationStore,
    DurableStore,  # last: its declared ManyStore method must not shadow ManyStore's
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
        """The store's server on a client for BLPOP and XREAD BLOCK: its read timeout
        outlasts one block, and longer waits are several (see :mod:`bus.store.blocking`);
        the store's own client where its reads never time out (on a cluster, a cluster
        client of its own)."""
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

    def ping(self) -> None:
        """Return if the backend answers; raise :class:`Unavailable` if it does not."""
        try:
            self.r.ping()
        except REDIS_ERRORS as exc:
            raise unavailable(exc) from exc

    # -- sessions ---------------------------------------------------------------------

    # -- the queue ----------------------------------------------------------------------

    # -- locks and events ---------------------------------------------------------------

    # -- schedule -----------------------------------------------------------------------

    # -- heartbeats ---------------------------------------------------------------------
