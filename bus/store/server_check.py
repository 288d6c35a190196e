"""The store's server checked against what the store supports (bus.core.server_version).

``inbox up`` and ``inbox doctor`` call :func:`check_server` once at connect: each server
(every node of a cluster) is named by its ``INFO server`` and assessed, so a server below
the floor is refused in words before a script fails on it, and one lacking a known
security fix is named with the versions that have it.
"""

from __future__ import annotations

from typing import Any

import redis

from bus.core.server_version import Assessment, assess, identify

from .cluster import REDIS_ERRORS, cluster_client

# Worst first: the state the whole answer takes.
_ORDER = ("too_old", "unfixed", "unknown", "ok")


def _infos(client: Any, cluster: bool) -> list[dict[str, Any]]:
    if not cluster:
        return [client.info("server")]
    answer = client.info("server", target_nodes=client.ALL_NODES)
    # redis-py answers a dict per node address for several nodes.
    return [v for v in answer.values() if isinstance(v, dict)] or [answer]


def assess_client(client: Any, *, cluster: bool = False) -> dict[str, Any]:
    """``{"state", "message", "servers"}`` for the server(s) behind ``client``: ``state`` is
    the worst of the servers' (``too_old``, ``unfixed``, ``ok``), or ``unknown`` when the
    server will not say its version (INFO refused); ``message`` is that server's words."""
    try:
        infos = _infos(client, cluster)
    except redis.ResponseError as exc:
        return {
            "state": "unknown",
            "message": f"the server does not say its version (INFO: {exc}); the bus needs "
            "Redis 6.2 or Valkey 7.2.4 or later",
            "servers": [],
        }
    found: list[Assessment] = [assess(*identify(info)) for info in infos]
    worst = min(found, key=lambda a: _ORDER.index(a.state))
    names = sorted({a.name for a in found})
    return {
        "state": worst.state,
        "message": worst.message,
        "server": ", ".join(names),
        "servers": [a.as_dict() for a in found],
    }


def check_server(url: str, *, cluster: bool = False, timeout: float = 2.0) -> dict[str, Any]:
    """:func:`assess_client` on a client of its own to ``url``; ``state`` ``unreachable``
    (with the error) when the server does not answer within ``timeout``."""
    client: Any = None
    try:
        client = (
            cluster_client(url)
            if cluster
            else redis.Redis.from_url(
                url, decode_responses=True, socket_connect_timeout=timeout, socket_timeout=timeout
            )
        )
        return assess_client(client, cluster=cluster)
    except REDIS_ERRORS as exc:
        return {
            "state": "unreachable",
            "message": f"the store's server does not answer: {exc}",
            "servers": [],
        }
    finally:
        if client is not None:
            client.close()


__all__ = ["assess_client", "check_server"]
