"""What every aggregate of :class:`~bus.store.store.Store` is given: the store's core
(:class:`~bus.store.core.StoreCore`), each of its calls handed on."""

from __future__ import annotations

# Not ``typing.TYPE_CHECKING``: importing typing alone costs the read lane several ms
# (bus.lanes.read imports this module).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def store_failed(fn: Any) -> Any:
    """:func:`bus.store.redis_errors.store_failed`, imported at the first call: the read
    lane imports the store's parts and must not import redis."""
    wrapped: Any = None

    def call(*args: Any, **kwargs: Any) -> Any:
        nonlocal wrapped
        if wrapped is None:
            from .redis_errors import store_failed

            wrapped = store_failed(fn)
        return wrapped(*args, **kwargs)

    call.__doc__, call.__name__ = fn.__doc__, fn.__name__
    return call


class StorePart:
    """What an aggregate of the store is given: the store's plumbing (its
    :class:`~bus.store.core.StoreCore`: the client ``r``, the key builder ``k``, the lock
    TTL, the registered scripts, pipelines and round trips), each call handed to it. The
    core's own parts define these calls themselves."""

    r: Any
    k: Any
    lock_ttl_ms: int
    cluster: bool
    io: Any  # the StoreCore

    def __init__(self, core: Any) -> None:
        self.io = core
        self.r = core.r
        self.k = core.k
        self.lock_ttl_ms = core.lock_ttl_ms
        self.cluster = core.cluster

    def script(self, name: str) -> Any:
        """The registered Lua script ``bus/store/lua/<name>.lua``."""
        return self.io.script(name)

    def pipeline(self, transaction: bool = False) -> Any:
        """A pipeline that may also run scripts (:meth:`bus.store.core.StoreCore.pipeline`)."""
        return self.io.pipeline(transaction)

    def run(
        self, name: str, sid: str, keys: tuple[str, ...], args: list[Any], client: Any = None
    ) -> Any:
        """Lua script ``name`` on session ``sid``'s keys (all in the ``{sid}`` slot)."""
        return self.io.run(name, sid, keys, args, client)

    def server_time_ms(self) -> int:
        """The store's own clock (Redis ``TIME``), in ms."""
        return self.io.server_time_ms()

    def script_call(self, name: str, keys: list[str], args: list[Any]) -> tuple[Any, ...]:
        """Script ``name`` on ``keys`` as a bare ``EVALSHA`` tuple (:mod:`bus.store.many`)."""
        return self.io.script_call(name, keys, args)

    def run_scripts(self, calls: list[tuple[Any, ...]]) -> list[Any]:
        """:meth:`script_call` tuples in one round trip per node (:mod:`bus.store.many`)."""
        return self.io.run_scripts(calls)

    def run_in_order(self, calls: list[tuple[Any, ...]]) -> list[Any]:
        """:meth:`script_call` and command tuples in one round trip, in order."""
        return self.io.run_in_order(calls)

    def run_packed(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        """``commands`` in one round trip on one connection (:mod:`bus.store.many`)."""
        return self.io.run_packed(commands)

    def execute_loaded(self, pipe: Any) -> list[Any]:
        """Run a pipeline holding bare ``EVALSHA`` calls (:mod:`bus.store.many`)."""
        return self.io.execute_loaded(pipe)

    def run_loaded_then(
        self, stack: list[tuple[Any, ...]], tail: tuple[Any, ...] | None
    ) -> tuple[list[Any], list[Any]]:
        """:meth:`execute_loaded` of ``stack`` with ``tail`` after it on one connection."""
        return self.io.run_loaded_then(stack, tail)

    def execute_durable(
        self, pipe: Any, level: str, timeout_s: float, ids: list[str], sids: list[str]
    ) -> list[Any]:
        """A send's writes confirmed at ``level`` (:mod:`bus.store.durable`)."""
        return self.io.execute_durable(pipe, level, timeout_s, ids, sids)

    def delete_one(self, key: str) -> None:
        """``DEL`` of one key, sent as one command: a cluster client's ``delete()`` splits
        its keys by slot through a pipeline of its own, even for one (a delivery loop's
        turn paid one)."""
        self.r.execute_command("DEL", key)
