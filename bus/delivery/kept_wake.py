"""A session's wake command, kept on its host: the worker runs only what is here.

The session's record in Redis carries its ``wake_cmd`` too (``inbox status`` shows it,
the delivery plans by it), but a process that can write to Redis could put any shell
line there. So the command the worker runs is the one the session's opener registered
on this host: ``session open`` (run on the session's host) writes it to the session's
private folder (``$INBOX_HOME/inbox/<sid>/wake_cmd``, 0600 in a 0700 folder, this
user's), and :func:`kept` reads it back from there. A command in Redis with no file
beside it is never run.

Beside it the opener keeps its ``PATH`` (``wake_path``): the worker runs the command with
that ``PATH`` before its own, so ``codex``/``claude`` (and the ``node`` an npm install
runs them with) are found as they were where the session was opened, not only on the
worker's ``PATH``. And the processes whose life is the session's (``holders``, each a pid
and its start time, kept by a harness's hooks): when none of them is alive any more, the
session's harness is gone (:func:`holders_gone`): the host's worker closes it
(bus.delivery.holder_watch), and a wake that comes first closes it instead of running the
command. What keeps the session from being woken is noted here too (:func:`note`:
``wake_problem`` from its hooks, ``wake_error`` from a failed wake), for ``inbox doctor``,
which reads the floor and needs no Redis.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import TYPE_CHECKING

import psutil

from bus.local.owned import open_private, open_read

if TYPE_CHECKING:
    from .floor import Floor

WAKE_FILE = "wake_cmd"
PATH_FILE = "wake_path"
HOLDERS_FILE = "holders"
# What :func:`note` keeps: why nothing can wake the session; how its last wake failed.
NOTES = ("wake_problem", "wake_error")
# A wake command is a command line: far under this.
MAX_BYTES = 64 * 1024


def keep(floor: Floor, sid: str, cmd: str | None, path: str | None = None) -> None:
    """Keep ``cmd`` as ``sid``'s wake command on this host, with ``path`` (default: this
    process's ``PATH``) to run it with (None: forget any kept, and its holders). A failed
    wake's note goes: the session starts afresh."""
    d = floor.session_dir(sid, create=True)
    with contextlib.suppress(FileNotFoundError):
        (d / "wake_error").unlink()
    if not cmd:
        for name in (WAKE_FILE, PATH_FILE, HOLDERS_FILE):
            with contextlib.suppress(FileNotFoundError):
                (d / name).unlink()
        return
    _write(floor, sid, PATH_FILE, path if path is not None else os.environ.get("PATH", ""))
    _write(floor, sid, WAKE_FILE, cmd)


def keep_holders(floor: Floor, sid: str, holders: list[tuple[int, float]]) -> None:
    """Keep the processes (pid, start time) whose life is ``sid``'s (none: forget them)."""
    if not holders:
        with contextlib.suppress(FileNotFoundError):
            (floor.session_dir(sid) / HOLDERS_FILE).unlink()
        return
    _write(floor, sid, HOLDERS_FILE, json.dumps([[int(p), float(t)] for p, t in holders]))


def note(floor: Floor, sid: str, name: str, text: str | None) -> None:
    """Keep ``text`` as the session's ``name`` (one of :data:`NOTES`; None: forget it)."""
    if name not in NOTES:
        raise ValueError(f"not a wake note: {name!r}")
    if text:
        _write(floor, sid, name, text)
        return
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        (floor.session_dir(sid) / name).unlink()


def notes(floor: Floor, sid: str) -> dict[str, str]:
    """The session's kept :data:`NOTES` that are set."""
    found = {name: _read(floor, sid, name) for name in NOTES}
    return {k: v for k, v in found.items() if v}


def kept_path(floor: Floor, sid: str) -> str | None:
    """The ``PATH`` ``sid``'s opener kept to run its wake command with, or None."""
    return _read(floor, sid, PATH_FILE)


def holders_gone(floor: Floor, sid: str) -> bool:
    """Whether ``sid`` kept holders and none of them is alive (a pid that now names
    another process, started later, is not one of them)."""
    raw = _read(floor, sid, HOLDERS_FILE)
    if not raw:
        return False
    try:
        holders = [(int(p), float(t)) for p, t in json.loads(raw)]
    except (ValueError, TypeError):
        return False
    return bool(holders) and not any(alive(p, t) for p, t in holders)


def alive(pid: int, started: float) -> bool:
    """Whether ``pid`` names the process started at ``started`` (epoch seconds), living."""
    try:
        proc = psutil.Process(pid)
        return abs(proc.create_time() - started) < 1.0 and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _write(floor: Floor, sid: str, name: str, text: str) -> None:
    d = floor.session_dir(sid, create=True)
    tmp = d / f"{name}.tmp"
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = open_private(tmp, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, text.encode("utf-8"))
    finally:
        os.close(fd)
    os.replace(tmp, d / name)  # a worker reads the old file or the new, never a part


def kept(floor: Floor, sid: str) -> str | None:
    """The wake command ``sid``'s opener kept on this host, or None."""
    return _read(floor, sid, WAKE_FILE)


def _read(floor: Floor, sid: str, name: str) -> str | None:
    path = floor.session_dir(sid) / name
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


__all__ = [
    "NOTES",
    "WAKE_FILE",
    "alive",
    "holders_gone",
    "keep",
    "keep_holders",
    "kept",
    "kept_path",
    "note",
    "notes",
]
