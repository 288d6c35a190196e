"""A floor's lines as bytes, and the record of lines a socket listener handed on.

``encode_line`` writes a line as every reader of the file floor reads it; the helpers
below write and read a floor file's bytes whole. ``heard.jsonl`` beside a session's
socket records the lines its one listener handed on (:func:`record_heard`), so a drain
that finds a copy of one on the file (its ack came after the sender's wait) confirms it
without handing it on again (:func:`heard_keys`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from bus.core.errors import BadInput
from bus.local.owned import open_private as _open_private

# The lines a socket listener handed on (bus.surfaces.harness.listener), its last HEARD_KEEP: a
# line whose ack came late is on the file too, and a drain does not hand it on again.
HEARD = "heard.jsonl"
HEARD_KEEP = 1000


def encode_line(obj: dict[str, Any]) -> bytes:
    """One JSON line. ASCII-only, so no U+2028 or similar can split it for any reader."""
    if not isinstance(obj, dict):
        raise BadInput("a floor line must be a JSON object")
    try:
        text = json.dumps(obj, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise BadInput(f"line is not JSON-serialisable: {exc}") from exc
    return text.encode("ascii") + b"\n"


def line_key(obj: dict[str, Any]) -> str | None:
    """A floor line's identity for a listener's dedupe and a drain's skip: its id with
    its sender (``from_session``, ``from``), since a message id is its sender's; a
    second sender's line reusing the id is another line. None without an id."""
    msg_id = obj.get("id")
    if not isinstance(msg_id, str) or not msg_id:
        return None
    sender = [str(obj.get("from_session") or ""), str(obj.get("from") or "")]
    return json.dumps([msg_id, *sender], separators=(",", ":"))


def heard_lines(session_dir: Path) -> list[dict[str, Any]]:
    """The lines a socket listener recorded handing on (:func:`record_heard`), each as
    recorded: its id, and its sender when it had one."""
    try:
        raw = (session_dir / HEARD).read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return []
    out = []
    for line in raw.splitlines():
        obj = parse_line(line)
        if obj is not None and isinstance(obj.get("id"), str):
            out.append(obj)  # a torn last line: that id is not skipped (at least once)
    return out


def heard_ids(session_dir: Path) -> set[str]:
    """The ids a socket listener recorded handing on (:func:`record_heard`)."""
    return {str(obj["id"]) for obj in heard_lines(session_dir)}


def heard_keys(session_dir: Path) -> set[str]:
    """The lines a socket listener recorded handing on, by :func:`line_key`."""
    return {k for k in map(line_key, heard_lines(session_dir)) if k is not None}


def record_heard(
    session_dir: Path, heard: list[str] | list[dict[str, Any]], keep: int = HEARD_KEEP
) -> None:
    """Record the lines in ``heard`` (lines, or bare ids: a line with no sender) as
    handed on by the session's one socket listener (its only writer); past about twice
    ``keep`` lines of 64 bytes the file is replaced by its last ``keep``."""
    path = session_dir / HEARD
    records = []
    for one in heard:
        line = {"id": one} if isinstance(one, str) else one
        rec = {f: line[f] for f in ("id", "from_session", "from") if line.get(f)}
        records.append(encode_line(rec))
    append_private(path, b"".join(records))
    try:
        if os.stat(path).st_size <= 2 * keep * 64:
            return
        lines = path.read_bytes().splitlines()
    except FileNotFoundError:
        return
    if len(lines) > keep:
        tmp = session_dir / f"{HEARD}.tmp"
        tmp.unlink(missing_ok=True)
        append_private(tmp, b"".join(x + b"\n" for x in lines[-keep:]))
        os.replace(tmp, path)  # a drain reads the old file or the new, never a part


def append_private(path: Path, data: bytes, *, sync: bool = False) -> None:
    """Append ``data`` to ``path``, created 0600 whatever the umask (on the disk before
    this returns when ``sync``)."""
    fd = _open_private(path, os.O_WRONLY | os.O_APPEND)
    try:
        write_all(fd, data)
        if sync:
            os.fdatasync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    # One write is the norm; a short write (disk nearly full) is finished rather than lost.
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def torn_tail(fd: int) -> bool:
    """Does the file open on ``fd`` end inside a line (a last byte that is not a newline)?"""
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


def read_fd(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


def parse_line(raw: bytes) -> dict[str, Any] | None:
    try:
        obj = json.loads(raw)
    except ValueError:  # includes UnicodeDecodeError
        return None
    return obj if isinstance(obj, dict) else None
