"""What the embedded server's log says of its append-only file at a start, in words.

A damaged AOF stops the server with a line naming ``valkey-check-aof --fix``, a tool that
is not on the user's PATH: :func:`damage_message` names ``inbox repair-aof`` instead. A
write cut short by a crash (the last file ends mid-command) is loaded anyway and the file
truncated (``aof-load-truncated``, the default); :func:`cut_notes` says which file lost
how many bytes, so the loss is said, not silent.
"""

from __future__ import annotations

import re
from pathlib import Path

from bus.core.errors import BusError

_DAMAGED = ("Bad file format reading the append only file", "Unexpected end of file reading")
_TRUNCATED = re.compile(r"Truncating the AOF (\S+) at offset (\d+)")
LOG_NAME = "redis.log"


class AofDamaged(BusError):
    """The embedded server would not load its damaged AOF; ``inbox repair-aof`` repairs it."""

    code = "aof_damaged"


def aof_sizes(data_dir: Path) -> dict[str, int]:
    """Each AOF file's size now (before a start), by name."""
    sizes: dict[str, int] = {}
    for folder in (data_dir / "appendonlydir", data_dir):
        if folder.is_dir():
            for path in folder.glob("appendonly.aof*"):
                if path.is_file():
                    sizes[path.name] = path.stat().st_size
    return sizes


def log_offset(data_dir: Path) -> int:
    """Where the server's log ends now: a start's lines are read from here."""
    log = data_dir / LOG_NAME
    return log.stat().st_size if log.exists() else 0


def log_since(data_dir: Path, offset: int) -> str:
    log = data_dir / LOG_NAME
    if not log.exists():
        return ""
    with log.open("rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def damage_message(log_text: str) -> str | None:
    """The words for a server that would not load its AOF, else ``None``."""
    for line in log_text.splitlines():
        if any(mark in line for mark in _DAMAGED):
            said = line.split(" # ", 1)[-1].split(":")[0].strip()
            return (
                f"the embedded server's append-only file is damaged ({said}): run "
                "`inbox repair-aof` (it copies the AOF aside first, then cuts it after its "
                "last whole write and says how much), then `inbox up` again"
            )
    return None


def cut_notes(log_text: str, before: dict[str, int]) -> list[str]:
    """One line per AOF file the server truncated while loading, with the bytes lost."""
    notes = []
    for name, offset in _TRUNCATED.findall(log_text):
        size = before.get(name)
        lost = f"{size - int(offset)} bytes" if size is not None else "its tail"
        notes.append(
            f"the append-only file {name} ended in a write cut short (the server stopped "
            f"mid-write): {lost} after byte {offset} were dropped, the writes before kept"
        )
    return notes


__all__ = ["AofDamaged", "aof_sizes", "cut_notes", "damage_message", "log_offset", "log_since"]
