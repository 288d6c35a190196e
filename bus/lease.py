"""A session's delivery lock as a short lease, renewed in the background while it runs.

The lock (``P:{sid}:lock``, a token with a TTL) used to be held for a 30 s TTL, so a
worker killed mid-delivery stalled its sessions for 30 s. Now the TTL is short
(``INBOX_LOCK_TTL_S``, default 3 s) and a renewal thread extends it every third of the
TTL while the delivery runs; a dead worker's lease lapses within one TTL and the next
delivery takes over.

Fencing: every write to a session's floor or socket is preceded by :meth:`Lease.held`,
which checks the token and extends the lease to a full TTL in one script. A write starts
only with at least one TTL (longer than the slowest write, a socket's 1.2 s ack wait)
ahead of it, so no other delivery can hold the lock while it runs; once a renewal or a
check fails the lease is lost for good and the delivery stops writing.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

import redis

if TYPE_CHECKING:
    from .store import Store

log = logging.getLogger(__name__)


class Lease:
    """The delivery lock for one session, held by this process until released or lost."""

    def __init__(self, store: Store, sid: str, token: str) -> None:
        self.store = store
        self.sid = sid
        self.token = token
        self.ttl_s = store.lock_ttl_ms / 1000
        self._lost = threading.Event()
        self._done = threading.Event()
        self._last_ok = time.monotonic()
        self._thread = threading.Thread(target=self._renew, name=f"lease-{sid}", daemon=True)

    @classmethod
    def acquire(cls, store: Store, sid: str) -> Lease | None:
        """Take the session's lock and start renewing it; None when another holds it."""
        token = store.lock(sid)
        if token is None:
            return None
        lease = cls(store, sid, token)
        lease._thread.start()
        return lease

    @property
    def lost(self) -> bool:
        return self._lost.is_set()

    def held(self) -> bool:
        """The fence before a write: still ours (and extended to a full TTL)?"""
        if self._lost.is_set():
            return False
        try:
            ok = self.store.extend_lock(self.sid, self.token)
        except redis.RedisError:
            ok = False
        if not ok:
            self._lose("the fence check failed")
        return ok

    def release(self) -> None:
        """Stop renewing and free the lock (if still ours; an error leaves it to lapse)."""
        self._done.set()
        try:
            self.store.unlock(self.sid, self.token)
        except redis.RedisError as exc:
            log.info("delivery lock for %s left to lapse: %s", self.sid, exc)

    def _lose(self, why: str) -> None:
        if not self._lost.is_set():
            self._lost.set()
            log.warning("delivery for %s lost its lease (%s); it stops writing", self.sid, why)

    def _renew(self) -> None:
        interval = max(0.05, self.ttl_s / 3)
        while not self._done.wait(interval):
            try:
                if self.store.extend_lock(self.sid, self.token):
                    self._last_ok = time.monotonic()
                    continue
                self._lose("another delivery holds it")
                return
            except redis.RedisError:
                # A blip: keep trying while the lease may still stand.
                if time.monotonic() - self._last_ok >= self.ttl_s:
                    self._lose("Redis did not answer for a whole TTL")
                    return
