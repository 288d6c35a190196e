"""A cluster none of whose nodes answers is an outage, as a standalone server that does not.

redis-py's cluster client, finding no node to read the slot table from (every node away:
a partition, the whole cluster restarting), raises ``RedisClusterException`` ("Redis
Cluster cannot be connected"), which is neither a ``redis.ConnectionError`` nor an
``OSError``: a loop that waits out outages (``bus.store.outage_log.OUTAGE_ERRORS``) did
not take it for one and ended, e.g. a worker's delivery loops and its heartbeat during a
partition; nor a ``redis.RedisError`` (``StoreError``, which code outside the store
catches for any failed store call): a worker's host-floor thread ended on it too.
:func:`as_outage` makes the client raise :class:`ClusterUnreachable` instead, which is
all three: a ``RedisClusterException``, a ``redis.RedisError`` and a builtin
``ConnectionError``.

Not a ``redis.ConnectionError``: redis-py's cluster pipeline retries those at once, ten
times, each walking every node again.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import redis
from redis.exceptions import RedisClusterException

T = TypeVar("T")

# What a node that does not answer raises (the cause of "cannot be connected").
_NOT_ANSWERING = (redis.ConnectionError, redis.TimeoutError, OSError)
# Newer redis-py says "no node answered" with an error of its own, from a command's
# retries as well as from the slot-table refresh (absent from older versions).
_UNREACHABLE: tuple[type[BaseException], ...] = tuple(
    e for e in (getattr(redis.exceptions, "RedisClusterUnreachableError", None),) if e
)


class ClusterUnreachable(RedisClusterException, redis.RedisError, ConnectionError):
    """No node of the cluster answered (each refused, timed out, or had no route)."""


def unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` is the cluster client's "no node answered" (pure)."""
    return (
        isinstance(exc, RedisClusterException)
        and not isinstance(exc, ClusterUnreachable)
        and (isinstance(exc, _UNREACHABLE) or isinstance(exc.__cause__, _NOT_ANSWERING))
    )


def reraised(call: Callable[..., T]) -> Callable[..., T]:
    """``call``, raising :class:`ClusterUnreachable` where it raised "no node answered"."""

    @functools.wraps(call)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        try:
            return call(*args, **kwargs)
        except RedisClusterException as exc:
            if unreachable(exc):
                raise ClusterUnreachable(str(exc)) from (exc.__cause__ or exc)
            raise

    return wrapper


def as_outage(client: Any) -> Any:
    """``client`` (a ``RedisCluster``) with its slot-table refresh raising
    :class:`ClusterUnreachable` when no node answers; its pipelines share that refresh.
    Its commands too: newer redis-py gives up on a command with an error of its own."""
    nodes = client.nodes_manager
    nodes.initialize = reraised(nodes.initialize)
    client.execute_command = reraised(client.execute_command)
    return client


__all__ = ["ClusterUnreachable", "as_outage", "reraised", "unreachable"]
