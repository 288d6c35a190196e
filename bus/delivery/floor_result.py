"""What one drain of the file floor took, what it hands on, and the floor's settings.

:class:`DrainResult` is :meth:`bus.delivery.floor.Floor.drain`'s answer; the helpers say
whether the floor fsyncs (:func:`floor_sync`) and what a drain that skipped lines says on
stderr (:func:`skipped_words`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bus.core.settings import Settings


@dataclass
class DrainResult:
    """What one drain took off the floor: parsed lines, and raw lines kept aside."""

    lines: list[dict[str, Any]] = field(default_factory=list)
    malformed: list[str] = field(default_factory=list)
    # Lines the session's socket listener handed on already (their ack came after the
    # sender's wait, so the sender put them on the file too): not handed on again, but
    # confirmed like the rest.
    heard: list[dict[str, Any]] = field(default_factory=list)
    # Notices whose every message the session's model was handed already (bus.delivery.said):
    # confirmed, not handed on again.
    repeated: list[dict[str, Any]] = field(default_factory=list)

    @property
    def taken(self) -> list[dict[str, Any]]:
        """Every good line the drain took: those it hands on and those already heard or
        said (a drain confirms them all)."""
        return [*self.lines, *self.heard, *self.repeated]

    def handed(self, kept: Path) -> list[dict[str, Any]]:
        """What the drain hands on: its lines, then, when lines were torn or malformed,
        one ``{"kind": "malformed", "count", "kept"}`` line saying how many were skipped
        and the file (``kept``) that holds them."""
        if not self.malformed:
            return self.lines
        note = {"kind": "malformed", "count": len(self.malformed), "kept": str(kept)}
        return [*self.lines, note]


def floor_sync(settings: Settings) -> bool:
    """Does the floor fsync what it writes? Unless the deployment's durability is
    ``memory``: a notice recorded as written then survives a power cut, as the send
    that caused it does."""
    return settings.durability != "memory"


def skipped_words(lines: list[dict[str, Any]]) -> str | None:
    """The one stderr line a drain's ``malformed`` line calls for, else None."""
    for line in lines:
        if line.get("kind") == "malformed":
            return (
                f"inbox drain: {line.get('count')} unreadable line(s) skipped, kept in "
                f"{line.get('kept')}; `inbox doctor` lists them, `inbox threads` shows "
                "what came"
            )
    return None


__all__ = ["DrainResult", "floor_sync", "skipped_words"]
