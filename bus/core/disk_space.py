"""A full disk in words: which folder, how much is free, how much to free.

``inbox up`` (and any command) that fails writing with "no space left on device" refuses
``disk_full`` naming the folder and the fix instead of ``[Errno 28]``; ``inbox status``
says the same in its ``disk`` entry while the disk holding ``$INBOX_HOME`` is (nearly)
full. Standard library only: the read lane reports it too.
"""

from __future__ import annotations

import errno
import os

# Not ``typing``: importing it alone costs the read lane several ms.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

MB = 1024 * 1024
# What to free: room for the embedded store's append-only file to grow and rewrite,
# the logs and the floors of a busy day.
NEED_BYTES = 64 * MB
# Below this, the store's next save or a floor's next line may fail: status says so.
FULL_BYTES = 16 * MB
FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def size_words(n: int) -> str:
    """``n`` bytes as a person reads them (``0 B``, ``512 KB``, ``3.2 MB``, ``1.5 GB``)."""
    if n < 1024:
        return f"{n} B"
    for unit, size in (("GB", 1024 * MB), ("MB", MB)):
        if n >= size:
            return f"{n / size:.1f}".removesuffix(".0") + f" {unit}"
    return f"{n // 1024} KB"


def existing(path: str) -> str:
    """``path``, or its nearest folder that exists (a home not made yet: its parent)."""
    p = os.path.abspath(path)
    while not os.path.exists(p) and os.path.dirname(p) != p:
        p = os.path.dirname(p)
    return p if os.path.isdir(p) else os.path.dirname(p)


def free_bytes(path: str) -> int | None:
    """Free bytes (for this user) on the disk holding ``path``; ``None`` when unknown."""
    try:
        st = os.statvfs(existing(path))  # as shutil.disk_usage, without importing it
        return st.f_bavail * st.f_frsize
    except OSError:
        return None


def full_words(folder: str, free: int | None) -> tuple[str, str]:
    """``(message, fix)`` for a full disk holding ``folder`` with ``free`` bytes (pure)."""
    left = f" ({size_words(free)} free)" if free is not None else ""
    message = f"the disk holding {folder} is full{left}"
    fix = (
        f"free at least {size_words(NEED_BYTES)} on it, or set INBOX_HOME to a folder on a "
        "disk with room"
    )
    return message, fix


def is_full(exc: BaseException) -> bool:
    """Whether ``exc`` is a write refused for want of space (or quota)."""
    return isinstance(exc, OSError) and exc.errno in FULL_ERRNOS


def full_refusal(exc: OSError, home: str | None) -> dict[str, Any]:
    """The ``disk_full`` refusal for a write ``exc`` refused for want of space: the
    folder it wrote in (else ``home``), what is free there, the fix."""
    target = str(exc.filename) if exc.filename else (home or os.getcwd())
    folder = existing(target)
    message, fix = full_words(folder, free_bytes(folder))
    return {
        "ok": False,
        "error": "disk_full",
        "message": f"{message}: could not write {target}",
        "folder": folder,
        "fix": fix,
    }


def disk_entry(home: str, free: int | None) -> dict[str, Any]:
    """``inbox status``'s ``disk`` entry for the disk holding ``home`` (pure): ok with its
    free bytes, or not ok below :data:`FULL_BYTES` with the message and fix."""
    if free is None or free >= FULL_BYTES:
        return {"ok": True, "folder": home, "free_bytes": free}
    message, fix = full_words(home, free)
    return {
        "ok": False,
        "reason": "disk_full",
        "folder": home,
        "free_bytes": free,
        "message": message,
        "fix": fix,
    }


def with_disk(report: dict[str, Any], home: str) -> dict[str, Any]:
    """``inbox status``'s answer with its ``disk`` entry; its ``ok`` false when full."""
    entry = disk_entry(home, free_bytes(home))
    out = {**report, "disk": entry}
    if not entry["ok"]:
        out["ok"] = False
    return out
