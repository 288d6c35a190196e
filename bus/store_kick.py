"""The store's kick list: delivery kicks for a host's delivery loops (bus/kick.py).

A mixin of :class:`~bus.store.Store` like :mod:`bus.store_many`. The list and the loops'
liveness key share the host's slot ``{kick:<host>}``.
"""

from __future__ import annotations

from typing import Any

# A kick list this long takes no more kicks (its loops are stuck or gone): they go to
# Celery, and the scheduler's sweep covers whatever the list holds.
KICK_CAP = 10_000


class KickStore:
    """Push, pop and liveness of a host's kick list."""

    r: Any
    k: Any

    def script(self, name: str) -> Any:  # the registered Lua script; Store defines it
        raise NotImplementedError

    def push_kicks(self, host: str, sids: list[str]) -> bool:
        """Put ``sids`` on ``host``'s kick list when a delivery loop of it is alive
        (``kick_push.lua``, one round trip); False when none is (or the list is full)."""
        keys = [self.k.kick_list(host), self.k.kick_alive(host)]
        return bool(self.script("kick_push")(keys=keys, args=[KICK_CAP, *sids]))

    def kick_alive(self, host: str, ttl_ms: int) -> None:
        """A delivery loop of ``host`` is running (for ``ttl_ms``)."""
        self.r.set(self.k.kick_alive(host), "1", px=ttl_ms)

    def kick_client(self, block_s: float, name: str) -> tuple[Any, Any]:
        """``(client, pool)``: a connection of its own whose socket outlasts a ``block_s``
        pop; the caller disconnects ``pool`` (``None`` for a cluster client)."""
        from .blocking import own_client

        return own_client(self.r, socket_timeout=block_s + 10, name=name)

    def pop_kicks(self, client: Any, host: str, block_s: float, count: int) -> list[str]:
        """Up to ``count`` kicks off ``host``'s list: the oldest waited for (as
        :meth:`pop_kick`), then those behind it without waiting (LPOP with a count), so a
        loop delivers a burst's sessions in one batch (bus.batch)."""
        first = self.pop_kick(client, host, block_s)
        if first is None:
            return []
        rest = client.lpop(self.k.kick_list(host), count - 1) if count > 1 else None
        return [first, *(r.decode() if isinstance(r, bytes) else str(r) for r in rest or [])]

    def pop_kick(self, client: Any, host: str, block_s: float) -> str | None:
        """The oldest kick on ``host``'s list, waiting up to ``block_s`` on ``client``
        (from :meth:`kick_client`); None when none came."""
        got = client.blpop([self.k.kick_list(host)], timeout=block_s)
        if not got:
            return None
        sid = got[1]
        return sid.decode() if isinstance(sid, bytes) else str(sid)
