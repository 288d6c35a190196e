"""The store's host claims: which floor (machine and ``INBOX_HOME``) serves a host.

A part of the store's ``schedule`` aggregate (:class:`bus.store.store.Schedule`); the policy and the
worker's keeper are in :mod:`bus.telemetry.host_floor`.
"""

from __future__ import annotations

from .base import StorePart

# Not ``typing.TYPE_CHECKING``: importing typing alone costs the read lane several ms
# (bus.lanes.read imports this module).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

REFUSED_TTL_S = 3600


class HostClaimStore(StorePart):
    """Claim, renew, release and read a host's claim; record a refused worker."""

    def claim_host(self, host: str, floor: str, pid: int, ttl_ms: int) -> dict[str, str] | None:
        """Claim ``host`` for ``floor`` (or renew the claim) for ``ttl_ms``; ``None`` when
        claimed, else the holder's ``{"floor", "pid", "since"}`` (``host_claim.lua``)."""
        reply = self.script("host_claim")(keys=[self.k.host_claim(host)], args=[floor, pid, ttl_ms])
        if int(reply[0]) == 1:
            return None
        return {"floor": str(reply[1]), "pid": str(reply[2]), "since": str(reply[3])}

    def release_host(self, host: str, floor: str, pid: int) -> bool:
        """Give ``host``'s claim up if ``floor``'s process ``pid`` still holds it."""
        return bool(self.script("host_release")(keys=[self.k.host_claim(host)], args=[floor, pid]))

    def host_floors(self, hosts: list[str]) -> list[tuple[dict[str, str], dict[str, str]]]:
        """Per host: its claim and its last refusal as stored (each empty when none)."""
        if not hosts:
            return []
        pipe = self.pipeline()
        for host in hosts:
            pipe.hgetall(self.k.host_claim(host))
            pipe.hgetall(self.k.host_refused(host))
        replies = pipe.execute()
        return [(dict(replies[2 * i]), dict(replies[2 * i + 1])) for i in range(len(hosts))]

    def record_refusal(self, host: str, fields: dict[str, Any]) -> None:
        """Keep the last refusal of ``host`` for an hour (``inbox status``, ``/health``)."""
        key = self.k.host_refused(host)
        pipe = self.pipeline()
        pipe.delete(key)
        pipe.hset(key, mapping=fields)
        pipe.expire(key, REFUSED_TTL_S)
        pipe.execute()
