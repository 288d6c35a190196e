"""The store's Redis client, made from the settings (no bus needed: the fast drain uses it)."""

from __future__ import annotations

from typing import Any

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from .cluster import cluster_client
from .settings import Settings


def redis_client(settings: Settings) -> Any:
    """A client for the bus store: ``INBOX_REDIS_URL`` or the embedded server's socket;
    a :class:`~redis.cluster.RedisCluster` with ``INBOX_REDIS_CLUSTER=1``."""
    if settings.redis_cluster:
        return cluster_client(settings.store_url())
    return redis.Redis.from_url(
        settings.store_url(),
        decode_responses=True,
        socket_connect_timeout=5,
        health_check_interval=30,
        # A restarted Redis leaves dead pooled connections: retry on a fresh one, briefly.
        retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), 4),
        retry_on_error=[redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError],
    )
