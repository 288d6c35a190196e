"""A session's delivery lock as a short lease, renewed in the background while it runs.

The lock (``P:{sid}:lock``, a token with a TTL) has a short TTL (``INBOX_LOCK_TTL_S``,
default 3 s), so a worker killed mid-delivery stalls its sessions for one TTL at most; a
renewal thread extends it every third of the
TTL while the delivery runs; a dead worker's lease lapses within one TTL and the next
delivery takes over.

Fencing: every write to a session's floor or socket is preceded by :meth:`Lease.held`,
which checks the token and extends the lease to a full TTL in one script. A write starts
only with at least one TTL (longer than the slowest write, a socket's 1.2 s ack wait)
ahead of it, so no other delivery can hold the lock while it runs; once a renewal or a
check fails the lease is lost for good and the delivery stops writing.

A fence check within :data:`FRESH_S` (or a twentieth of the TTL, if less) of the last
confirmation (the lock taken, or extended by a check or a renewal, counted from before
the command was sent) may answer from that confirmation instead of asking Redis again
(:meth:`Lease.held` with ``fresh=True``): the lease then still runs at least a TTL less
that window, and another delivery can take the lock in between only if the key itself
vanished (a Redis restart that lost it), which a write already in flight is exposed to
for the whole of its run anyway.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from bus.store.redis_errors import StoreFailed

if TYPE_CHECKING:
    from bus.store.store import Store

log = logging.getLogger(__name__)

# How recent a confirmation lets a ``fresh`` fence check skip its round trip.
FRESH_S = 0.05


class Lease:
    """The delivery lock for one session, held by this process until released or lost."""

    def __init__(self, store: Store, sid: str, token: str) -> None:
        self.store = store
        self.sid = sid
        self.token = token
        self.ttl_s = store.lock_ttl_ms / 1000
        # A flag, not an Event: set once by whichever thread finds the lease lost, read
        # by the writer before each write (a bool's assignment is atomic). The Event the
        # renewals sleep on is made only for a lease that renews itself: a batch's 64
        # leases made 128 Events (each a Condition and its lock) a chunk.
        self._lost = False
        self._done: threading.Event | None = None
        self._last_ok = time.monotonic()
        # When the last confirmation was sent (the lock taken or extended).
        self._confirmed_at = float("-inf")
        self._fresh_s = min(FRESH_S, self.ttl_s / 20)

    def _start_renewing(self) -> None:
        # The thread made only here: a batch's leases (renewed together, bus.delivery.engine) make
        # none (a Thread object was a tenth of a due wake's Python).
        self._done = threading.Event()
        threading.Thread(target=self._renew, name=f"lease-{self.sid}", daemon=True).start()

    @classmethod
    def acquire(cls, store: Store, sid: str) -> Lease | None:
        """Take the session's lock and start renewing it; None when another holds it."""
        token = store.delivery.lock(sid)
        if token is None:
            return None
        lease = cls(store, sid, token)
        lease._start_renewing()
        return lease

    @classmethod
    def adopt(
        cls, store: Store, sid: str, token: str, sent_at: float, *, renew: bool = True
    ) -> Lease:
        """The lease of a lock this process took with ``token`` (in a script that did more,
        :meth:`bus.store.store.Store.delivery.begin_delivery`) by a call sent at ``sent_at``
        (``time.monotonic()``); starts renewing it (``renew=False``: the caller renews it
        with others, bus.delivery.engine, through :meth:`confirmed`)."""
        lease = cls(store, sid, token)
        lease._confirmed_at = sent_at
        if renew:
            lease._start_renewing()
        return lease

    def confirmed(self, ok: bool, sent_at: float) -> bool:
        """Take the answer of a fence check made elsewhere (in a pipeline, sent at
        ``sent_at``): ``ok`` extends the lease's freshness, else the lease is lost."""
        if self._lost:
            return False
        if not ok:
            self._lose("the fence check failed")
            return False
        self._confirmed_at = max(self._confirmed_at, sent_at)
        return True

    @property
    def lost(self) -> bool:
        return self._lost

    def held(self, *, fresh: bool = False) -> bool:
        """The fence before a write: still ours (and extended to a full TTL)? With
        ``fresh``, a confirmation sent within the fresh window answers without a round
        trip (see the module's docstring)."""
        if self._lost:
            return False
        sent_at = time.monotonic()
        if fresh and sent_at - self._confirmed_at < self._fresh_s:
            return True
        try:
            ok = self.store.delivery.extend_lock(self.sid, self.token)
        except StoreFailed:
            ok = False
        return self.confirmed(ok, sent_at)

    def fresh(self) -> bool:
        """A confirmation within the fresh window stands (a ``fresh`` :meth:`held` would
        answer without a round trip)."""
        return not self._lost and (time.monotonic() - self._confirmed_at < self._fresh_s)

    def stop_renewing(self) -> None:
        """Stop the renewals; the caller unlocks (many leases at once, bus.delivery.engine)."""
        if self._done is not None:
            self._done.set()

    def release(self, *, take_again: bool = False) -> bool | None:
        """Stop renewing and free the lock (if still ours; an error leaves it to lapse).
        With ``take_again``, the hand-off flag is taken right after, in the same round
        trip (:meth:`bus.store.store.Store.delivery.unlock_and_take_again`): its answer, or ``None``
        when that failed (the caller takes it alone)."""
        if self._done is not None:
            self._done.set()
        try:
            if take_again:
                return self.store.delivery.unlock_and_take_again(self.sid, self.token)
            self.store.delivery.unlock(self.sid, self.token)
        except StoreFailed as exc:
            log.info("delivery lock for %s left to lapse: %s", self.sid, exc)
        return None

    def _lose(self, why: str) -> None:
        if not self._lost:
            self._lost = True
            log.warning("delivery for %s lost its lease (%s); it stops writing", self.sid, why)

    def _renew(self) -> None:
        interval = max(0.05, self.ttl_s / 3)
        done = self._done
        assert done is not None  # made before the thread starts
        while not done.wait(interval):
            try:
                sent_at = time.monotonic()
                if self.store.delivery.extend_lock(self.sid, self.token):
                    self._last_ok = time.monotonic()
                    self._confirmed_at = max(self._confirmed_at, sent_at)
                    continue
                self._lose("another delivery holds it")
                return
            except StoreFailed:
                # A blip: keep trying while the lease may still stand.
                if time.monotonic() - self._last_ok >= self.ttl_s:
                    self._lose("Redis did not answer for a whole TTL")
                    return
