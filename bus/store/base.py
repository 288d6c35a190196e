"""What every part of :class:`~bus.store.store.Store` (its mixins) relies on the Store for."""

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
    """The client, the key builder, the registered scripts and pipelines: the Store
    defines them; a part declares them once here instead of each its own."""

    r: Any
    k: Any
    lock_ttl_ms: int
    cluster: bool

    def script(self, name: str) -> Any:  # the registered Lua script; Store defines it
        raise NotImplementedError

    def pipeline(self, transaction: bool = False) -> Any:  # Store defines it
        raise NotImplementedError

    def execute_loaded(self, pipe: Any) -> list[Any]:  # ManyStore defines it
        raise NotImplementedError

    def execute_durable(  # DurableStore defines it
        self, pipe: Any, level: str, timeout_s: float, ids: list[str], sids: list[str]
    ) -> list[Any]:
        raise NotImplementedError

    def run(  # a script on one session's keys; Store defines it
        self, name: str, sid: str, keys: tuple[str, ...], args: list[Any], client: Any = None
    ) -> Any:
        raise NotImplementedError

    def delete_one(self, key: str) -> None:
        """``DEL`` of one key, sent as one command: a cluster client's ``delete()`` splits
        its keys by slot through a pipeline of its own, even for one (a delivery loop's
        turn paid one)."""
        self.r.execute_command("DEL", key)
