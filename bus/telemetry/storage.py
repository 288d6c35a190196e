"""The store's write faults where ``inbox doctor`` reports them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bus.store.store import Store

EFFECT = "every send and every delivery's record is refused (store_refused) until fixed"


def storage_problems(store: Store) -> list[dict[str, Any]]:
    """The doctor's problem row for a store that refuses writes (none when it takes them)."""
    fault = store.write_fault()
    if fault is None:
        return []
    return [
        {
            "check": "storage",
            "effect": EFFECT,
            "reason": fault.words,
            "fix": fault.fix,
            "store_reason": fault.reason,
        }
    ]
