"""When a notice written to the floor counts as heard, and when it is carried again.

A notice is heard only when confirmed: a listening harness's socket ack, or a drain that
took it off the floor and recorded it (``floor_drained.lua``, the one place marks move
``new → noticed``). Until then the notice's record stays in ``P:{sid}:floor``. A drainer
killed after taking the file and before recording it leaves a record whose notice is no
longer on the floor; the delivery's sweep (``floor_sweep.lua``) marks it gone, and still
gone ``GONE_GRACE_MS`` later gives its messages back to ``new``, so the next notice
carries them again. The scheduler kicks a delivery for a session whose floor records are
due a look, so this happens within ``CARRY_AGAIN_BOUND_S`` even when nothing else arrives.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

# A live drainer records its marks milliseconds after unlinking its claim; a record seen
# gone for this long belongs to a drainer that died.
GONE_GRACE_MS = 5_000
# A record still on the floor is looked at again after this long (one delivery each).
CHECK_EVERY_MS = 10_000
# The scheduler's sweep runs every 5 s: two looks (gone, then past the grace), each at
# most CHECK_EVERY_MS or GONE_GRACE_MS plus a sweep apart.
SWEEP_S = 5
CARRY_AGAIN_BOUND_S = (CHECK_EVERY_MS + GONE_GRACE_MS) // 1000 + 2 * SWEEP_S


def needs_look(record_json: str, now_ms: int) -> bool:
    """Should the scheduler kick a delivery to look at this floor record now?"""
    try:
        rec = json.loads(record_json)
    except ValueError:
        return True
    if rec.get("gone") is not None:
        return True
    last = rec.get("checked") or rec.get("at") or 0
    return now_ms - int(last) >= CHECK_EVERY_MS


def any_needs_look(records: Iterable[str], now_ms: int) -> bool:
    return any(needs_look(r, now_ms) for r in records)


__all__ = ["CARRY_AGAIN_BOUND_S", "GONE_GRACE_MS", "any_needs_look", "needs_look"]
