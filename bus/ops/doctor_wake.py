"""``inbox doctor``'s wake check: a session of this host that nothing can wake while it
is idle (its harness's hooks found no way: ``wake_problem``), or whose last wake command
failed (``wake_error``), as noted on its floor (bus.delivery.kept_wake). No Redis."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bus.delivery import kept_wake
from bus.delivery.floor import Floor

EFFECT = "is not woken while idle: messages wait for its next turn"
FIX = {
    "wake_problem": "see the reason; docs/harnesses.md says how each harness is woken",
    "wake_error": (
        "run the session's wake command by hand (its folder's wake_cmd) to see why it "
        "fails; a harness not found needs its folder on the PATH of `session open`"
    ),
}


def wake_problems(home: Path, sids: list[str]) -> list[dict[str, Any]]:
    """One problem per note kept for each of ``sids``."""
    floor = Floor(home)
    found: list[dict[str, Any]] = []
    for sid in sids:
        try:
            notes = kept_wake.notes(floor, sid)
        except OSError:
            continue
        for name, text in notes.items():
            found.append(
                {"session": sid, "check": name, "effect": EFFECT, "reason": text, "fix": FIX[name]}
            )
    return found


__all__ = ["wake_problems"]
