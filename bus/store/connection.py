"""The store's Redis client, made from the settings (no bus needed: the fast drain uses it),
and a plain client on the Celery broker (where the host queues are)."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any, TypeVar

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from bus.core.settings import Settings

from .cluster import cluster_client

T = TypeVar("T")


class AfterFirstAnswer(Retry):
    """Retries a failed call only once Redis has answered this client.

    A restarted Redis leaves dead pooled connections, and a call on one is retried on a
    fresh connection, briefly, to bridge the restart. A client that has never reached
    Redis (no server there, a wrong password) gains nothing by waiting: it fails at once,
    so a command run with the bus down says so without a pause. The copies each pooled
    connection takes (``deepcopy``) share whether Redis has answered.
    """

    def __init__(self, backoff: Any, retries: int) -> None:
        super().__init__(backoff, retries)
        self._answered = [False]  # shared by the copies (see __deepcopy__)

    def __deepcopy__(self, memo: dict[int, Any]) -> AfterFirstAnswer:
        other = copy.copy(self)
        other._backoff = copy.deepcopy(self._backoff, memo)
        return other

    def call_with_retry(
        self,
        do: Callable[[], T],
        fail: Callable[..., Any],
        is_retryable: Callable[[Exception], bool] | None = None,
        with_failure_count: bool = False,
    ) -> T:
        self._backoff.reset()
        failures = 0
        while True:
            try:
                result = do()
            except self._supported_errors as error:
                if is_retryable and not is_retryable(error):
                    raise
                failures += 1
                if with_failure_count:
                    fail(error, failures)
                else:
                    fail(error)
                hopeless = not self._answered[0] or isinstance(error, redis.AuthenticationError)
                if hopeless or failures > self.get_retries():
                    raise error
                time.sleep(self._backoff.compute(failures))
            else:
                self._answered[0] = True
                return result


# Clients kept for reuse by settings (:func:`reuse_clients`); None: each call makes one.
_reused: dict[tuple[Any, ...], Any] | None = None


def reuse_clients() -> None:
    """From now on :func:`redis_client` answers the same client (and its open connections)
    to calls with the same store settings. For a process that runs one command after
    another (bus.surfaces.command_server's workers): a command then skips the connect and
    its handshake."""
    global _reused
    if _reused is None:
        _reused = {}


def redis_client(settings: Settings) -> Any:
    """A client for the bus store: ``INBOX_REDIS_URL`` or the embedded server's socket;
    a :class:`~redis.cluster.RedisCluster` with ``INBOX_REDIS_CLUSTER=1``. Its calls wait
    ``INBOX_REDIS_TIMEOUT_S`` for an answer, its connects ``INBOX_REDIS_CONNECT_TIMEOUT_S``
    (commands that block use clients of their own: bus.store.blocking)."""
    if _reused is None:
        return _new_client(settings)
    key = (
        settings.store_url(),
        settings.redis_cluster,
        settings.redis_timeout_s,
        settings.redis_connect_timeout_s,
    )
    client = _reused.get(key)
    if client is None:
        client = _reused[key] = _new_client(settings)
    return client


def _new_client(settings: Settings) -> Any:
    if settings.redis_cluster:
        return cluster_client(
            settings.store_url(),
            timeout_s=settings.redis_timeout_s,
            connect_timeout_s=settings.redis_connect_timeout_s,
        )
    return redis.Redis.from_url(
        settings.store_url(),
        decode_responses=True,
        socket_timeout=settings.redis_timeout_s,
        socket_connect_timeout=settings.redis_connect_timeout_s,
        health_check_interval=30,
        retry=AfterFirstAnswer(ExponentialBackoff(cap=0.5, base=0.05), 4),
        retry_on_error=[redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError],
    )


def broker_client(url: str) -> redis.Redis | None:
    """A client on the Celery broker at ``url`` (kombu's form: ``redis+socket://`` is a
    unix socket), to read its queues' lengths; ``None`` for a ``sentinel://`` broker and
    any broker that is not Redis (its worker then says why it cannot start)."""
    if url.startswith("redis+socket://"):
        url = "unix://" + url[len("redis+socket://") :]
    if url.partition("://")[0].lower() not in ("redis", "rediss", "unix"):
        return None
    return redis.Redis.from_url(url, decode_responses=True, socket_connect_timeout=2)


class Lazy:
    """A client made on first use and made again after a failed try: a cluster client
    connects when made, and a supervisor must start while its store is away."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make, self._client = make, None

    def __getattr__(self, name: str) -> Any:
        if self._client is None:
            self._client = self._make()
        return getattr(self._client, name)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
