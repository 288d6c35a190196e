"""The store's delivery locks: one lock per session, held as a lease, with the hand-off flag.

A part of the store's ``delivery`` aggregate (:class:`bus.store.store.Delivery`). The lock
``P:{sid}:lock`` is a token with a TTL (``lock_ttl_ms``), extended while a delivery runs
(bus.delivery.lease); the hand-off flag ``P:{sid}:again`` is taken with the unlock
(bus.delivery.engine). Each write here raises the store's own error
(:class:`~bus.store.redis_errors.StoreFailed`) when Redis does not carry it out.
"""

from __future__ import annotations

import secrets

from .base import StorePart
from .redis_errors import store_failed


class LockStore(StorePart):
    """Delivery locks, one session or many at once."""

    def lock(self, sid: str) -> str | None:
        """Take the session's delivery lock for ``lock_ttl_ms``: a token, or ``None``
        while another holder's lock has not expired."""
        token = secrets.token_hex(8)
        ok = self.r.set(self.k.s(sid, "lock"), token, nx=True, px=self.lock_ttl_ms)
        return token if ok else None

    @store_failed
    def extend_lock(self, sid: str, token: str) -> bool:
        """Keep holding the lock through a long delivery (and a hand-off flag set for it,
        bus.delivery.engine); False if it was lost."""
        return bool(self.run("extend_lock", sid, ("lock", "again"), [token, self.lock_ttl_ms]))

    @store_failed
    def unlock(self, sid: str, token: str) -> None:
        """Release the lock if ``token`` still holds it; another holder's lock stays."""
        self.script("unlock")(keys=[self.k.s(sid, "lock")], args=[token])

    @store_failed
    def unlock_and_take_again(self, sid: str, token: str) -> bool:
        """:meth:`~bus.store.store.Store.delivery.unlock`, then :meth:`~bus.store.inbox.InboxStore.take_again`,
        in that order, one round trip: whether another run was asked for."""
        keys = self.k.s_many(sid, ("lock", "again"))
        return bool(int(self.script("unlock")(keys=keys, args=[token])[1]))

    def unlock_many(self, held: list[tuple[str, str]]) -> list[bool]:
        """:meth:`unlock_and_take_again` for each ``(sid, token)``, in one round trip (the
        flag taken in the unlock's own call, after it: ``unlock.lua``)."""
        calls = [
            self.script_call("unlock", self.k.s_many(sid, ("lock", "again")), [token])
            for sid, token in held
        ]
        return [bool(int(reply[1])) for reply in self.run_scripts(calls)]

    @store_failed
    def extend_many(self, held: list[tuple[str, str]]) -> list[bool]:
        """:meth:`~bus.store.store.Store.delivery.extend_lock` for each ``(sid, token)``, in one round
        trip: which are still ours (each extended to a full TTL)."""
        calls = [
            self.script_call(
                "extend_lock", self.k.s_many(sid, ("lock", "again")), [token, self.lock_ttl_ms]
            )
            for sid, token in held
        ]
        return [bool(int(r)) for r in self.run_scripts(calls)]

    def ask_again(self, sid: str, ttl_ms: int) -> None:
        """Ask the delivery holding ``sid`` to run once more after it unlocks."""
        self.r.set(self.k.s(sid, "again"), "1", px=ttl_ms)

    def take_again(self, sid: str) -> bool:
        """Whether another run was asked for since the last take (GETDEL)."""
        return bool(self.r.getdel(self.k.s(sid, "again")))
