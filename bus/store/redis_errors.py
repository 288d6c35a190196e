"""Redis not answering becomes the bus's own :class:`~bus.core.errors.Unavailable`, here only.

:func:`translate_redis_errors` wraps every public method of the facade (:class:`bus.api.Bus`),
so each surface (CLI, gateway, MCP server, Celery tasks) sees one error family: a refusal
it maps as usual (``unavailable``, exit 3, HTTP 503), in words: nothing answered at that
address, or the server refused the password (``reason``: ``no_answer`` or ``password``).
These errors are translated (connection, timeout, password, a cluster without a
reachable node), and so is a store that answers but refuses writes (``MISCONF`` disk full
or a failed save, ``READONLY`` a replica, ``OOM``, ``NOREPLICAS``): one refusal,
:class:`~bus.core.errors.StoreRefused` (``store_refused``, its ``reason`` and ``fix``;
bus.core.store_faults). Any other error reply is a bug and stays what it is.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any, TypeVar

import redis
from redis.exceptions import ClusterError, RedisClusterException

from bus.core.errors import BusError, StoreRefused, Unavailable
from bus.core.store_faults import StoreFault, fault_of

from .cluster_reach import ClusterUnreachable

NOT_ANSWERING: tuple[type[Exception], ...] = (
    redis.ConnectionError,
    redis.TimeoutError,
    ClusterError,
    RedisClusterException,
)

C = TypeVar("C", bound=type)

# A server that did not answer a call (refused, reset, timed out).
CONNECTION_ERRORS: tuple[type[Exception], ...] = (redis.ConnectionError, redis.TimeoutError)

# A server's error reply (a surface asks :func:`refused` whether it refuses writes).
REPLY_ERRORS: tuple[type[Exception], ...] = (redis.ResponseError,)

# Any failure of a store call (the backend down, or answering with an error): code outside
# bus/store catches this name, never Redis's own classes.
StoreError = redis.RedisError


class StoreFailed(Exception):
    """A store write Redis did not carry out: it did not answer, or answered with an error
    (a replica's ``READONLY`` during a failover, a server still loading). What code
    outside the store catches where it retries or lets a lease lapse."""


class RedisUnavailable(Unavailable, StoreFailed, redis.ConnectionError):
    """:class:`Unavailable`, and still a ``redis.ConnectionError``: code that catches
    Redis's own errors (the metrics scrape, older surfaces) keeps catching it."""

    words: str | None = None  # what failed, without the hint (down_message)


class RedisRefused(StoreRefused, StoreFailed, redis.ResponseError):
    """:class:`StoreRefused`, and still a ``redis.ResponseError`` (and the store's
    :class:`StoreFailed`): code that catches Redis's own errors keeps catching it.
    ``fault`` is the fault its reply named (its words and fix apart)."""

    def __init__(self, message: str, fault: StoreFault, **details: Any) -> None:
        super().__init__(message, **details)
        self.fault = fault


def refused(exc: BaseException) -> RedisRefused | None:
    """The bus's refusal for an error reply that says the store refuses writes, or None."""
    if isinstance(exc, RedisRefused):
        return exc
    if not isinstance(exc, redis.ResponseError):
        return None
    fault = fault_of(str(exc))
    if fault is None:
        return None
    said = (str(exc).strip().splitlines() or [""])[0]
    return RedisRefused(
        f"{fault.words}; nothing was written; {fault.fix}",
        fault,
        reason=fault.reason,
        fix=fault.fix,
        store_said=said[:300],
    )


def as_refusal(exc: BaseException) -> BusError:
    """Any store failure a surface caught as the bus's refusal: the store refusing
    writes, else Redis not answering."""
    return refused(exc) or unavailable(exc)


HINT = (
    "is `inbox up` running for this INBOX_HOME, or INBOX_REDIS_URL set to the store "
    "(a home that joined another machine's store keeps it in $INBOX_HOME/store.env)?"
)
PASSWORD_HINT = (
    "check the password in INBOX_REDIS_URL (the embedded server's own is kept in "
    "$INBOX_HOME/redis/password)"
)
# redis-py's "Error 111 connecting to 127.0.0.1:1. Connection refused." and its kin.
_CONNECTING = re.compile(r"^Error (?:\S+ )?connecting to (?P<where>.+?)\.(?: (?P<why>.+?)\.?)?$")
# What a server's refusal of the password means, by the words its reply starts with.
_PASSWORD_REPLIES = (
    ("hello must be called", "it needs a password and none was given"),
    ("authentication required", "it needs a password and none was given"),
    ("noauth", "it needs a password and none was given"),
    ("invalid username-password", "the password is wrong"),
    ("wrongpass", "the password is wrong"),
    ("invalid password", "the password is wrong"),
    ("auth <password> called without", "a password was given but it has none"),
    ("client sent auth", "a password was given but it has none"),
)


def down_message(exc: BaseException, where: str | None = None) -> tuple[str, str]:
    """The words for a Redis that cannot be used (without the hint), and the reason code:
    ``no_answer`` (nothing there, refused, timed out) or ``password`` (it answered, and
    refused the password). ``where`` names the server when the error does not."""
    if isinstance(exc, RedisUnavailable):  # said already: its words, never wrapped twice
        return exc.words or str(exc), str(exc.details.get("reason", "no_answer"))
    if isinstance(exc, ClusterUnreachable) and exc.__cause__ is not None:
        return down_message(exc.__cause__, where)  # the last node's own words
    text = (str(exc).strip().splitlines() or [""])[0]
    if isinstance(exc, redis.AuthenticationError):
        low = text.lower()
        why = next((w for start, w in _PASSWORD_REPLIES if low.startswith(start)), None)
        at = f" at {where}" if where else ""
        return f"Redis{at} refused the connection: {why or text}", "password"
    m = _CONNECTING.match(text)
    if m:
        where = m.group("where")
        why = (m.group("why") or "").rstrip(".").lower() or "no answer"
    elif isinstance(exc, redis.TimeoutError):
        why = "no answer in time"
    else:
        why = text.rstrip(".") or type(exc).__name__
    at = f" at {where}" if where else ""
    return f"Redis did not answer{at} ({why})", "no_answer"


def unavailable(exc: BaseException, where: str | None = None) -> RedisUnavailable:
    """The bus's refusal for a Redis that cannot be used (one message, never wrapped twice)."""
    if isinstance(exc, RedisUnavailable):
        return exc
    words, reason = down_message(exc, where)
    hint = PASSWORD_HINT if reason == "password" else HINT
    err = RedisUnavailable(f"{words}; {hint}", reason=reason)
    err.words = words
    return err


def translated(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (RedisUnavailable, RedisRefused):
            raise  # a nested facade call already said it
        except NOT_ANSWERING as exc:
            raise unavailable(exc) from exc
        except redis.ResponseError as exc:
            said = refused(exc)
            if said is None:
                raise
            raise said from exc

    return call


F = TypeVar("F", bound=Callable[..., Any])


def store_failed(fn: F) -> F:
    """A store method whose every Redis error becomes the store's own: not answering,
    :class:`RedisUnavailable`; any other error reply, :class:`StoreFailed`."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (RedisUnavailable, RedisRefused):
            raise
        except NOT_ANSWERING as exc:
            raise unavailable(exc) from exc
        except redis.RedisError as exc:
            said = refused(exc)
            if said is not None:
                raise said from exc
            raise StoreFailed(str(exc)) from exc

    return call  # type: ignore[return-value]


def translate_redis_errors(cls: C) -> C:
    """Class decorator: every public method of ``cls`` raises Unavailable for a silent Redis."""
    for name, value in list(vars(cls).items()):
        if not name.startswith("_") and callable(value) and not isinstance(value, type):
            setattr(cls, name, translated(value))
    return cls
