"""One log line when Redis goes away and one when it is back, not a traceback per try.

The scheduler ticks twice a second and every delivery touches Redis; during a restart of
Redis each try fails the same way. :class:`Outage` turns that into two lines: the first
failure (``Redis unreachable``) and the first success after it (``Redis back after N s``).
"""

from __future__ import annotations

import logging
import threading
import time

import redis
from redis.exceptions import ClusterDownError, RedisClusterException, TryAgainError

from .redis_errors import refused

# What a Redis restart looks like from a client: refused, reset, timed out, or a reply
# that the server is still loading its append-only file.
OUTAGE_ERRORS: tuple[type[BaseException], ...] = (
    redis.ConnectionError,
    redis.TimeoutError,
    redis.BusyLoadingError,
    ConnectionError,
    OSError,
)


# And a cluster's failover: no node answering for a slot yet, the slot's master down or
# moving (redis-py raises these outside ConnectionError).
FAILOVER_ERRORS: tuple[type[BaseException], ...] = (
    *OUTAGE_ERRORS,
    RedisClusterException,
    ClusterDownError,
    TryAgainError,
)


class Outage:
    """Tracks one process's view of Redis; logs each transition once."""

    def __init__(self, who: str, logger: logging.Logger) -> None:
        self.who = who
        self.log = logger
        self._since: float | None = None
        self._lock = threading.Lock()

    @property
    def down(self) -> bool:
        return self._since is not None

    def failed(self, exc: BaseException) -> None:
        """A try failed because Redis is away or refuses writes; logs only the first of an
        outage (a refusal with its reason and fix)."""
        with self._lock:
            if self._since is not None:
                return
            self._since = time.monotonic()
        said = refused(exc)
        if said is not None:
            self.log.warning(
                "%s: %s; waiting, retrying (the store said: %s)",
                self.who,
                str(said),
                said.details.get("store_said", ""),
            )
            return
        self.log.warning("%s: Redis unreachable (%s); retrying", self.who, _short(exc))

    def ok(self) -> None:
        """A try worked; logs the recovery if Redis was away."""
        with self._lock:
            if self._since is None:
                return
            took = time.monotonic() - self._since
            self._since = None
        self.log.warning("%s: Redis back after %.1f s", self.who, took)


def waits_out(exc: BaseException) -> bool:
    """Whether a loop waits ``exc`` out (logged once by :class:`Outage`) instead of failing:
    Redis away (:data:`OUTAGE_ERRORS`), or a store that refuses writes (disk full, a
    replica, full memory: bus.core.store_faults) until its operator fixes it."""
    return isinstance(exc, OUTAGE_ERRORS) or refused(exc) is not None


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:160]
