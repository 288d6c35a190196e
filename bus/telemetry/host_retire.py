"""Retiring a host: ``inbox host forget HOST`` takes a host gone for good out of the bus.

A host whose worker stopped beating stays ``down`` in ``inbox status`` (and on
``/metrics``) for as long as its records are kept. Forgetting removes them
(bus.store.host_records). Only a host that is ``down`` may be forgotten: one ``up`` or
``starting`` still serves (its next beat would bring it back), and one with sessions still
open would leave them with no host to deliver to. Closed sessions keep their records and
threads (a session's records outlive it); the host's Celery queue, whose deliveries no
worker will ever take, goes with it (the messages are in the sessions' queues, not there).

:func:`forget_refusal` is pure (table-driven tests); :func:`forget_host` reads the store
for it and, when it allows, deletes. A worker that starts between the two beats again and
is listed again at its first beat: nothing of a live host is lost for good.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bus.core.errors import BadInput, BusError, NotFound, Refused
from bus.core.ids import check_session_id
from bus.core.status_view import is_scheduler, scheduler_beat

if TYPE_CHECKING:
    from bus.core.settings import Settings
    from bus.store.store import Store

# The most open sessions a refusal names (it counts them all).
NAMED = 10


def forget_refusal(host: str, rows: list[dict[str, Any]], open_sids: list[str]) -> BusError | None:
    """Why host ``host`` may not be forgotten, or ``None`` when it may: ``rows`` are its
    heartbeat rows (its worker's and its scheduler's, as ``inbox status`` lists them),
    ``open_sids`` its sessions not closed."""
    if not rows:
        return NotFound(
            f"no host {host!r} is known to this store (`inbox status` lists the hosts "
            "under workers)",
            host=host,
        )
    live = [row for row in rows if row.get("state") in ("up", "starting")]
    if live:
        row = live[0]
        what = "scheduler" if row.get("role") == "scheduler" else "worker"
        return Refused(
            f"host {host} is {row['state']} (its {what} beats): only a host that is down "
            f"may be forgotten; stop its `inbox up` (INBOX_HOST={host}) first",
            code="host_not_down",
            host=host,
            state=row["state"],
        )
    if open_sids:
        named = ", ".join(open_sids[:NAMED]) + (", ..." if len(open_sids) > NAMED else "")
        return Refused(
            f"host {host} still has {len(open_sids)} open session(s) ({named}): close each "
            "(`inbox session close SID`) or open it again on a host that runs "
            "(`inbox session open SID --host HOST`), then forget it",
            code="host_has_sessions",
            host=host,
            sessions=open_sids,
        )
    return None


def check_host_name(host: str) -> str:
    """A host's name as ``inbox host forget`` takes it (a scheduler's heartbeat name is
    not a host: it goes with its host)."""
    check_session_id(host, "host name")
    if is_scheduler(host):
        raise BadInput(
            f"{host!r} is a scheduler's heartbeat; it is forgotten with its host: name the host"
        )
    return host


def forget_host(store: Store, settings: Settings, host: str) -> dict[str, Any]:
    """Forget host ``host`` (refused as :func:`forget_refusal` says, nothing written):
    ``{"ok": true, "host", "forgotten": [heartbeat names], "keys": deleted, "queued":
    deliveries dropped with its queue, "closed_sessions": its closed sessions, kept}``."""
    from bus.store.host_records import forget_host as delete_host

    from . import liveness

    check_host_name(host)
    names = (host, scheduler_beat(host))
    rows = [r for r in liveness.workers(store, settings.host_down_s) if r["name"] in names]
    mine = [s for s in store.sessions.sessions() if s.host == host]
    open_sids = sorted(s.session for s in mine if s.state != "closed")
    refusal = forget_refusal(host, rows, open_sids)
    if refusal is not None:
        raise refusal
    deleted = delete_host(store, host)
    return {
        "ok": True,
        "host": host,
        "forgotten": sorted(r["name"] for r in rows),
        **deleted,
        "closed_sessions": len(mine),
    }


__all__ = ["NAMED", "check_host_name", "forget_host", "forget_refusal"]
