"""Heard once: the record of what a session's model was already handed, and the rule that
keeps a repeat from reaching it again.

A notice can carry a message a second time under a new notice id: a worker killed, or a
store that lost its last writes, between the notice's write and its record gives the
messages back to ``new`` and the next notice names them again. The receiving side knows
better: ``said.jsonl`` in the session's floor folder lists the message ids that the
notices a drain, a socket listener or a waiter handed on carried, one a line, the last
:data:`SAID_KEEP`. Before a line is handed on
:func:`unsaid` checks it against the record: a notice whose every message was handed on
already is not handed on again (it is still confirmed, like any line taken); one that
repeats some carries them in ``repeats``, and its rendered text says so
(:func:`bus.core.notices.render_drained`).

Writers (a drain, a listener, a waiter) append under the file's lock; past about twice
:data:`SAID_KEEP` lines the file is replaced by its last :data:`SAID_KEEP`.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bus.local.owned import open_private

from .floor_lines import read_fd, same_file, write_all

SAID = "said.jsonl"
# Two days of a busy session's messages at a thousand a day.
SAID_KEEP = 2048
_TRIES = 100
# A message id's line, as the bus makes them (a UUID and its newline): the file is cut
# back to its last ``keep`` lines past about twice that many.
_LINE = 37


def said_keys(line: dict[str, Any]) -> list[str]:
    """The message ids handing ``line`` on tells the model: a notice's. A raw line (a
    message written whole) is its own: a listener's and a drain's line dedupe
    (bus.delivery.floor_lines.line_key) keep it from being handed on twice."""
    if line.get("kind") != "notice":
        return []
    payload = line.get("notice")
    ids = payload.get("messages") if isinstance(payload, dict) else None
    return [i for i in ids if isinstance(i, str) and i] if isinstance(ids, list) else []


def unsaid(line: dict[str, Any], said: set[str]) -> dict[str, Any] | None:
    """``line`` as it should reach the model given what it was ``said`` already: None when
    it repeats only what was said, else the line, with ``repeats`` listing the message ids
    it carries again (a copy; the line is returned unchanged when it repeats nothing)."""
    keys = said_keys(line)
    again = [k for k in keys if k in said]
    if not again:
        return line
    if len(again) == len(keys):
        return None
    known = line.get("repeats")
    before = [str(x) for x in known] if isinstance(known, list) else []
    repeats = before + [k for k in again if k not in before]
    out = {**line, "repeats": repeats}
    if isinstance(line.get("text"), str) and not before:
        from bus.core.notices import repeat_mark  # rare; the drain's fast lane skips it

        out["text"] = line["text"] + "\n" + repeat_mark(len(repeats))
    return out


def fresh_ids(line: dict[str, Any]) -> list[str]:
    """The message ids (or raw line keys) ``line`` tells the model for the first time."""
    repeats = line.get("repeats")
    again = set(repeats) if isinstance(repeats, list) else set()
    return [k for k in said_keys(line) if k not in again]


def read_said(session_dir: Path) -> set[str]:
    """The keys the session's model was handed (the last :data:`SAID_KEEP` or so)."""
    try:
        raw = (session_dir / SAID).read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return set()
    # A torn last line is a key never matched: at worst that line is heard twice.
    return {x.decode("utf-8", "replace") for x in raw.split(b"\n") if x}


def split_repeats(
    session_dir: Path, lines: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``lines`` as they should reach the model (:func:`unsaid`, in order, each one's
    messages counting as said for those after it), and the notices left out as repeats."""
    said = read_said(session_dir)
    fresh: list[dict[str, Any]] = []
    repeated: list[dict[str, Any]] = []
    for line in lines:
        kept = unsaid(line, said)
        if kept is None:
            repeated.append(line)
            continue
        fresh.append(kept)
        said.update(said_keys(kept))
    return fresh, repeated


class SaidCache:
    """:func:`read_said` for a long-lived reader (a socket listener): the file is read
    again only when it changed, and only its new tail when it grew."""

    def __init__(self, session_dir: Path) -> None:
        self.path = Path(session_dir) / SAID
        self._at: tuple[int, int] | None = None  # (device, inode) read
        self._offset = 0
        self._keys: set[str] = set()

    def keys(self) -> set[str]:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            self._at, self._offset, self._keys = None, 0, set()
            return self._keys
        try:
            st = os.fstat(fd)
            same = self._at == (st.st_dev, st.st_ino) and st.st_size >= self._offset
            if same and st.st_size == self._offset:
                return self._keys
            if not same:
                self._at, self._offset, self._keys = (st.st_dev, st.st_ino), 0, set()
            data = os.pread(fd, st.st_size - self._offset, self._offset)
        finally:
            os.close(fd)
        cut = data.rfind(b"\n") + 1  # a line still being written is read next time
        self._keys.update(x.decode("utf-8", "replace") for x in data[:cut].split(b"\n") if x)
        self._offset += cut
        return self._keys


def record_said(
    session_dir: Path,
    lines: Iterable[dict[str, Any]],
    keep: int = SAID_KEEP,
    *,
    sync: bool = False,
) -> None:
    """Add what ``lines`` told the model to the session's record (on the disk before this
    returns when ``sync``)."""
    keys = [k for line in lines for k in said_keys(line)]
    if not keys:
        return
    data = "".join(f"{k}\n" for k in keys if "\n" not in k).encode("utf-8", "replace")
    path = session_dir / SAID
    for _ in range(_TRIES):
        fd = open_private(path, os.O_RDWR | os.O_APPEND)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if not same_file(fd, path):
                continue  # replaced by a writer that cut it meanwhile: append to the new one
            write_all(fd, data)
            if sync:
                os.fdatasync(fd)
            if os.fstat(fd).st_size > 2 * keep * _LINE:
                _cut(session_dir, fd, keep)
            return
        finally:
            os.close(fd)  # also releases the lock


def _cut(session_dir: Path, fd: int, keep: int) -> None:
    # Under the lock: the last ``keep`` lines to a new file, put in the old one's place.
    lines = [x for x in read_fd(fd).split(b"\n") if x]
    if len(lines) <= keep:
        return
    tmp = session_dir / f".{SAID}.{os.getpid()}.tmp"
    tmp.unlink(missing_ok=True)
    out = open_private(tmp, os.O_WRONLY | os.O_TRUNC)
    try:
        write_all(out, b"".join(x + b"\n" for x in lines[-keep:]))
    finally:
        os.close(out)
    os.replace(tmp, session_dir / SAID)


__all__ = [
    "SAID",
    "SAID_KEEP",
    "SaidCache",
    "fresh_ids",
    "read_said",
    "record_said",
    "said_keys",
    "split_repeats",
    "unsaid",
]
