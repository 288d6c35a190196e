"""A Redis client for commands that block (BLPOP, XREAD BLOCK).

redis-py gives every connection a socket timeout (5 s by default in redis-py 8), so a
BLPOP or an XREAD that blocks longer fails with "Timeout reading from socket" although
the server is up. Commands that block get their own client whose socket timeout outlasts
one block of at most :data:`~bus.store.block_chunks.BLOCK_CHUNK_S` by the ordinary call timeout
(``INBOX_REDIS_TIMEOUT_S``); the store splits a longer wait into blocks that long. So a
wait of any length holds, and a connection that died under it (a partition, a server
gone without a word) is given up one call timeout after its block, not never.
"""

from __future__ import annotations

from typing import Any

import redis

from . import block_chunks

# Set by the pool itself from the other arguments; passing them back would be refused.
_POOL_OWN = ("orig_", "maint_notifications", "himport_registry")


def _kwargs(pool: Any) -> dict[str, Any]:
    return {k: v for k, v in pool.connection_kwargs.items() if not k.startswith(_POOL_OWN)}


def outlasting(client: Any, block_s: float) -> float:
    """A read timeout for a command that blocks ``block_s`` on ``client``'s server: the
    block plus the timeout of ``client``'s ordinary calls (``INBOX_REDIS_TIMEOUT_S``), so
    a dead connection is given up that long after the block, not never."""
    # A plain client's pool, or a cluster client's node settings, hold it.
    holder = getattr(client, "connection_pool", None) or getattr(client, "nodes_manager", None)
    ordinary = getattr(holder, "connection_kwargs", {}).get("socket_timeout")
    return block_s + (ordinary if ordinary else 5.0)


def own_client(client: Any, *, socket_timeout: float | None, name: str) -> tuple[Any, Any]:
    """``(client, pool)``: one connection of its own on ``client``'s server, with this read
    timeout and ``name`` in ``CLIENT LIST`` (who waits for what); the caller disconnects
    ``pool``. On a cluster, a cluster client of its own (:func:`~bus.store.cluster.own_cluster_client`)."""
    pool = getattr(client, "connection_pool", None)
    if pool is None:
        from .cluster import is_cluster, own_cluster_client

        if is_cluster(client):
            return own_cluster_client(client, socket_timeout=socket_timeout, name=name)
        return client, None
    kwargs = _kwargs(pool)
    kwargs.update(socket_timeout=socket_timeout, client_name=name)
    own = type(pool)(connection_class=pool.connection_class, max_connections=1, **kwargs)
    return redis.Redis(connection_pool=own), own


def blocking_client(client: Any) -> Any:
    """A client on the same server as ``client`` whose read timeout outlasts a block of
    :data:`~bus.store.block_chunks.BLOCK_CHUNK_S` (:func:`outlasting`).

    ``client`` itself is returned when its reads have no timeout at all (its owner chose
    that). On a cluster, a cluster client of its own
    (:func:`~bus.store.cluster.own_cluster_client`).
    """
    timeout = outlasting(client, block_chunks.BLOCK_CHUNK_S)
    pool = getattr(client, "connection_pool", None)
    if pool is None:
        from .cluster import is_cluster, own_cluster_client

        if is_cluster(client):
            return own_cluster_client(client, socket_timeout=timeout, name=None)[0]
        return client
    kwargs = _kwargs(pool)
    if kwargs.get("socket_timeout", 5) is None:
        return client
    kwargs["socket_timeout"] = timeout
    return redis.Redis(
        connection_pool=redis.ConnectionPool(connection_class=pool.connection_class, **kwargs)
    )


__all__ = ["blocking_client", "outlasting", "own_client"]
