"""The process runner's reads and writes on Redis servers it starts or watches.

:mod:`bus.ops` starts servers (the embedded one, a loopback cluster) and supervises the
workers by their heartbeats and queues; each client that takes is made here, so no
module outside :mod:`bus.store` talks to Redis.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import redis

from .beats import queue_mark_starting
from .cluster import REDIS_ERRORS, cluster_client
from .connection import Lazy, broker_client
from .keys import Keys


def socket_answers(path: Path, password: str | None) -> bool:
    """Whether a server answers PING on the unix socket ``path`` now."""
    client = redis.Redis(unix_socket_path=str(path), password=password)
    try:
        return bool(path.exists() and client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


class ClusterNode:
    """One loopback node of a cluster being built (slots, epoch, meeting the others)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.r = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=1)

    def answers(self) -> bool:
        """Whether the node answers PING now."""
        try:
            return bool(self.r.ping())
        except redis.RedisError:
            return False

    def add_slots(self, slots: range) -> None:
        self.r.execute_command("CLUSTER ADDSLOTS", *slots)

    def set_config_epoch(self, epoch: int) -> None:
        self.r.execute_command("CLUSTER SET-CONFIG-EPOCH", epoch)

    def meet(self, port: int) -> None:
        """Introduce the loopback node on ``port`` to this one."""
        self.r.execute_command("CLUSTER MEET", "127.0.0.1", port)

    def ready(self, nodes: int) -> bool:
        """Whether the node says ``cluster_state:ok`` and knows ``nodes`` nodes at least."""
        # redis-py parses both replies: INFO to a dict, NODES to address -> node.
        info = self.r.execute_command("CLUSTER INFO")
        known = len(self.r.execute_command("CLUSTER NODES"))
        return bool(info.get("cluster_state") == "ok" and known >= nodes)

    def close(self) -> None:
        self.r.close()


class Progress:
    """What the supervisor judges a host's worker by: its host queue's depth (on the
    broker, else on the store's server) and its heartbeat's ``progress`` and ``started``."""

    def __init__(self, client: Any, keys: Keys, broker: Any = None) -> None:
        self.client, self.keys, self.broker = client, keys, broker

    def of(self, queue: str, host: str) -> tuple[int, int | None, int | None] | None:
        """``(queued, progress_ms, started_ms)`` of the host's worker serving ``queue``;
        ``None`` when Redis does not answer (nothing to judge by)."""
        try:
            queued = (self.broker or self.client).llen(self.keys.celery_queue(queue))
            progress, started = self.client.hmget(self.keys.beat(host), "progress", "started")
        except REDIS_ERRORS:
            return None
        return int(queued), int(progress) if progress else None, int(started) if started else None

    def mark_starting(self, host: str) -> None:
        """Host ``host``'s worker is being started (as
        :meth:`bus.store.beats.BeatStore.mark_starting`, in one round trip); advisory: a
        store that does not answer is no reason not to start it."""
        try:
            pipe = self.client.pipeline(transaction=False)
            queue_mark_starting(pipe, self.keys, host)
            pipe.execute()
        except REDIS_ERRORS:
            pass

    def close(self) -> None:
        self.client.close()
        if self.broker is not None:
            self.broker.close()


def progress_on(
    store_url: str, key_prefix: str, *, cluster: bool = False, broker_url: str | None = None
) -> Progress | None:
    """A :class:`Progress` on the store at ``store_url`` (a cluster's client connects on
    first use) and the broker at ``broker_url`` (the store's server when not given);
    ``None`` when the broker is not Redis (its queues cannot be read)."""
    broker = broker_client(broker_url or store_url)
    if broker is None:
        return None
    client = (
        Lazy(lambda: cluster_client(store_url))
        if cluster
        else redis.Redis.from_url(store_url, decode_responses=True, socket_connect_timeout=2)
    )
    return Progress(client, Keys(key_prefix), broker)


def progress_client(url: str, key_prefix: str) -> Progress:
    """A :class:`Progress` on one server at ``url`` (queues and heartbeats both there)."""
    client = redis.Redis.from_url(url, decode_responses=True, socket_connect_timeout=2)
    return Progress(client, Keys(key_prefix))
