"""Redis not answering becomes the bus's own :class:`~bus.errors.Unavailable`, here only.

:func:`translate_redis_errors` wraps every public method of the facade (:class:`bus.api.Bus`),
so each surface (CLI, gateway, MCP server, Celery tasks) sees one error family: a refusal
it maps as usual (``unavailable``, exit 3, HTTP 503). Only "did not answer" errors are
translated (connection, timeout, a cluster without a reachable node); a Redis that
answers with an error (``ResponseError``) is a bug and stays what it is.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import redis
from redis.exceptions import ClusterError, RedisClusterException

from .errors import Unavailable

NOT_ANSWERING: tuple[type[Exception], ...] = (
    redis.ConnectionError,
    redis.TimeoutError,
    ClusterError,
    RedisClusterException,
)

C = TypeVar("C", bound=type)


class RedisUnavailable(Unavailable, redis.ConnectionError):
    """:class:`Unavailable`, and still a ``redis.ConnectionError``: code that catches
    Redis's own errors (the metrics scrape, older surfaces) keeps catching it."""


def unavailable(exc: BaseException) -> RedisUnavailable:
    return RedisUnavailable(
        f"Redis did not answer ({exc}); is `inbox up` running or INBOX_REDIS_URL set?"
    )


def translated(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except NOT_ANSWERING as exc:
            raise unavailable(exc) from exc

    return call


def translate_redis_errors(cls: C) -> C:
    """Class decorator: every public method of ``cls`` raises Unavailable for a silent Redis."""
    for name, value in list(vars(cls).items()):
        if not name.startswith("_") and callable(value) and not isinstance(value, type):
            setattr(cls, name, translated(value))
    return cls
