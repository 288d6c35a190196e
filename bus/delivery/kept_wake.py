"""A session's wake command, kept on its host: the worker runs only what is here.

The session's record in Redis carries its ``wake_cmd`` too (``inbox status`` shows it,
the delivery plans by it), but a process that can write to Redis could put any shell
line there. So the command the worker runs is the one the session's opener registered
on this host: ``session open`` (run on the session's host) writes it to the session's
private folder (``$INBOX_HOME/inbox/<sid>/wake_cmd``, 0600 in a 0700 folder, this
user's), and :func:`kept` reads it back from there. A command in Redis with no file
beside it is never run.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING

from bus.core.owned import open_private, open_read

if TYPE_CHECKING:
    from .floor import Floor

WAKE_FILE = "wake_cmd"
# A wake command is a command line: far under this.
MAX_BYTES = 64 * 1024


def keep(floor: Floor, sid: str, cmd: str | None) -> None:
    """Keep ``cmd`` as ``sid``'s wake command on this host (None: forget any kept)."""
    d = floor.session_dir(sid, create=True)
    path = d / WAKE_FILE
    if not cmd:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return
    tmp = d / f"{WAKE_FILE}.tmp"
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = open_private(tmp, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, cmd.encode("utf-8"))
    finally:
        os.close(fd)
    os.replace(tmp, path)  # a worker reads the old command or the new, never a part


def kept(floor: Floor, sid: str) -> str | None:
    """The wake command ``sid``'s opener kept on this host, or None."""
    path = floor.session_dir(sid) / WAKE_FILE
    try:
        fd = open_read(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        raw = os.read(fd, MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(raw) > MAX_BYTES:
        return None
    return raw.decode("utf-8", "replace") or None


__all__ = ["WAKE_FILE", "keep", "kept"]
