"""The store's plumbing: the client, the key builder, the registered Lua scripts, pipelines,
the round trips of many calls (:mod:`bus.store.many`) and a send's durable writes
(:mod:`bus.store.durable`). Each aggregate of :class:`~bus.store.store.Store` is given the
core and calls through it (:class:`~bus.store.base.StorePart`); the core holds no data of
its own beyond the scripts it loaded.
"""

from __future__ import annotations

from typing import Any

import redis

from .cluster import REDIS_ERRORS, OrderedBatch, is_cluster
from .durable import DurableStore
from .keys import Keys
from .lua_files import lua_source
from .many import RoundTrips
from .redis_errors import unavailable

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


class StoreCore(RoundTrips, DurableStore):
    """One bus's connection to its server or cluster (one key prefix): the plumbing every
    aggregate of the store shares."""

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

    def script_source(self, sha: str) -> str:
        """The Lua source of a script this store registered, by its SHA."""
        return self._sources[sha]

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
