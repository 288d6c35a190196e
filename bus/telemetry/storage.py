"""The store's write faults where ``inbox doctor`` reports them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bus.core.store_faults import StoreFault
    from bus.store.store import Store

EFFECT = "every send and every delivery's record is refused (store_refused) until fixed"


def storage_problems(store: Store, level: str = "memory") -> list[dict[str, Any]]:
    """The doctor's problem rows: a store that refuses writes, and a store that cannot
    meet ``level`` (``INBOX_DURABILITY``: every send is then refused ``not_durable``)."""
    fault = store.server.write_fault()
    rows = []
    unmet = store.server.durability_unmet(level)
    if unmet is not None:
        rows.append(
            {
                "check": "durability",
                "effect": f"every send is refused not_durable (INBOX_DURABILITY={level})",
                "reason": unmet,
                "fix": "run the store as the level needs (disk: appendonly yes on a server "
                "with WAITAOF, 7.2 or later, or appendfsync always; replica: a replica "
                "connected), or set INBOX_DURABILITY to a level it meets",
            }
        )
    if fault is not None:
        rows.append(storage_row(fault))
    return rows


def storage_row(fault: StoreFault) -> dict[str, Any]:
    """The doctor's problem row of a store that refuses writes with ``fault``."""
    return {
        "check": "storage",
        "effect": EFFECT,
        "reason": fault.words,
        "fix": fault.fix,
        "store_reason": fault.reason,
    }
