"""When a notice written to the floor counts as heard, and when it is carried again.

A notice is heard only when confirmed: a listening harness's socket ack, or a drain that
took it off the floor and recorded it (``floor_drained.lua``, the one place marks move
``new → noticed``). Until then the notice's record stays in ``P:{sid}:floor``. A drainer
killed after taking the file and before recording it leaves a record whose notice is no
longer on the floor; the delivery's sweep (``floor_sweep.lua``) marks it gone, and still
gone ``GONE_GRACE_MS`` later gives its messages back to ``new``, so the next notice
carries them again. The scheduler kicks a delivery for a session whose floor records are
due a look, so this happens within ``CARRY_AGAIN_BOUND_S`` even when nothing else arrives.
A look writes nothing unless it finds a notice gone. A notice that asked for a wake no
harness took (none seen since) is looked at with a growing gap (up to
``LOOK_CAP_MS``): its drainer, if one ever runs, is the harness seen again, which brings
the looks back to every ``CHECK_EVERY_MS``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

# A live drainer records its marks milliseconds after unlinking its claim; a record seen
# gone for this long belongs to a drainer that died.
GONE_GRACE_MS = 5_000
# A record still on the floor is looked at again after this long (one delivery each).
CHECK_EVERY_MS = 10_000
# The longest gap between looks at a woken session's notice its harness never took.
LOOK_CAP_MS = 300_000
# The scheduler's sweep runs every 5 s: two looks (gone, then past the grace), each at
# most CHECK_EVERY_MS or GONE_GRACE_MS plus a sweep apart.
SWEEP_S = 5
CARRY_AGAIN_BOUND_S = (CHECK_EVERY_MS + GONE_GRACE_MS) // 1000 + 2 * SWEEP_S


def last_look(elapsed_ms: int, backoff: bool) -> int | None:
    """When (ms after its record was written) a floor record's latest look came, at
    ``elapsed_ms``: every :data:`CHECK_EVERY_MS`, or with ``backoff`` at
    10, 20, 40, 80, 160 s and then every :data:`LOOK_CAP_MS`; ``None`` before the first."""
    if elapsed_ms < CHECK_EVERY_MS:
        return None
    if not backoff:
        return elapsed_ms // CHECK_EVERY_MS * CHECK_EVERY_MS
    at = CHECK_EVERY_MS
    while at < LOOK_CAP_MS:
        step = at  # the gap doubles until it reaches the cap
        if at + step > elapsed_ms:
            return at
        at += step
    return at + (elapsed_ms - at) // LOOK_CAP_MS * LOOK_CAP_MS


def needs_look(record_json: str, now_ms: int, last_seen: int | None = None) -> bool:
    """Should the scheduler kick a delivery to look at this floor record now?

    A record marked gone is looked at each sweep (its grace, then its give-back). One
    still on the floor is looked at when one of its looks (:func:`last_look`) fell within
    the last sweep: nothing is written to say it was looked at. A notice that asked for a
    wake whose harness has not been seen since it was written (``last_seen``: a turn, a
    drain, a tool step) is looked at less and less often, up to every
    :data:`LOOK_CAP_MS`; the harness seen again, every :data:`CHECK_EVERY_MS` again."""
    try:
        rec = json.loads(record_json)
    except ValueError:
        return True
    if rec.get("gone") is not None:
        return True
    at = int(rec.get("at") or 0)
    backoff = bool(rec.get("wake")) and (last_seen is None or last_seen < at)
    last = last_look(now_ms - at, backoff)
    return last is not None and now_ms - at - last < SWEEP_S * 1000


def any_needs_look(records: Iterable[str], now_ms: int, last_seen: int | None = None) -> bool:
    return any(needs_look(r, now_ms, last_seen) for r in records)


__all__ = [
    "CARRY_AGAIN_BOUND_S",
    "GONE_GRACE_MS",
    "LOOK_CAP_MS",
    "any_needs_look",
    "last_look",
    "needs_look",
]
