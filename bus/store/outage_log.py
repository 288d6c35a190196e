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
        """A try failed because Redis is away; logs only the first of an outage."""
        with self._lock:
            if self._since is not None:
                return
            self._since = time.monotonic()
        self.log.warning("%s: Redis unreachable (%s); retrying", self.who, _short(exc))

    def ok(self) -> None:
        """A try worked; logs the recovery if Redis was away."""
        with self._lock:
            if self._since is None:
                return
            took = time.monotonic() - self._since
            self._since = None
        self.log.warning("%s: Redis back after %.1f s", self.who, took)


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:160]
