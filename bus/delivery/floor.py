"""The file floor: a session's inbox on disk, compatible with prox inbox lines.

Layout::

    $INBOX_HOME/inbox/              0700
      <sid>/                        0700
        messages.jsonl              0600  pending queue, append-only
        messages.draining.<ns>.<pid>      a drain's claim (orphans are picked up next drain)
        inbox.sock                        only while a harness listens
        log.jsonl                   0600  delivered lines, the last 500
        malformed.jsonl             0600  torn or malformed lines, kept aside, never lost
                                          (a drain says how many; ``inbox doctor`` lists them)
        said.jsonl                  0600  what the model was handed, the last 2048
                                          (heard once: bus.delivery.said)
        log.lock                    0600  serialises the log rewrite between drainers

A writer that died mid-line leaves a torn tail (no newline at the end); the next append
starts on a new line, so only the fragment is malformed.

Concurrency: appenders take a shared ``flock`` on ``messages.jsonl`` and re-check, once
they hold it, that the path still names the file they opened. A drainer renames the file
(the claim) and then takes an exclusive lock on it, which waits for every appender that
opened the old file before the rename. So a line is either in the claimed file when it
is read, or in a fresh ``messages.jsonl``. prox's own appenders take no lock; they keep
prox's guarantees.

Ownership: every folder of the tree must be a real folder (never a link below the home)
owned by this user, and is tightened to 0700 when it is group or world accessible; one
owned by someone else is refused (:class:`UnsafeFloor`), as is a link or another user's
file where a floor file should be. Files are opened with ``O_NOFOLLOW`` relative to their
checked folder and checked again once open; a socket is connected to only when it is
this user's. So another local user who made ``$INBOX_HOME/inbox/<sid>/`` first can neither
redirect a delivery through a link nor receive it on a socket of their own.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import stat
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from bus.core import faults
from bus.core.clock import SYSTEM, Clock
from bus.core.errors import BadInput
from bus.core.ids import check_session_id
from bus.core.lane_names import DRAINING_PREFIX, FLOOR, MESSAGES  # the drain's lane's too
from bus.local import unix_socket
from bus.local.owned import check_parents, make_dirs, open_read
from bus.local.owned import open_private as _open_private

from .floor_lines import (
    append_private,
    encode_line,
    heard_keys,
    heard_lines,
    line_key,
    torn_tail,
)
from .floor_lines import parse_line as _parse
from .floor_lines import read_fd as _read_fd
from .floor_lines import same_file as _same_file
from .floor_lines import write_all as _write_all
from .floor_result import DrainResult
from .said import record_said, split_repeats

LOG = "log.jsonl"
MALFORMED = "malformed.jsonl"
SOCKET = unix_socket.SOCKET
LOG_LOCK = "log.lock"
LOG_KEEP = 500
_ACK_MAX = 64 * 1024
Via = Literal["socket", "file"]
_APPEND_TRIES = 1000


# Whether a path can itself be a socket's address; a longer one is reached through a
# short link (bus.local.unix_socket).
socket_path_fits = unix_socket.fits


_name_lock = threading.Lock()
_last_ns = 0


def _draining_name() -> str:
    # Strictly increasing within the process, so two threads never pick the same name.
    global _last_ns
    with _name_lock:
        _last_ns = max(time.time_ns(), _last_ns + 1)
        ns = _last_ns
    return f"{DRAINING_PREFIX}{ns}.{os.getpid()}"


def _draining_key(name: str) -> tuple[int, str]:
    # prox names its claims messages.draining.<ms>; ours carry ns. Order both by time.
    stamp = name[len(DRAINING_PREFIX) :].split(".", 1)[0]
    try:
        value = int(stamp)
    except ValueError:
        return (sys.maxsize, name)
    return (value * 1_000_000 if value < 10**14 else value, name)


@functools.lru_cache(maxsize=16384)
def _inbox_dir(home: Path, sid: str) -> Path:
    # Cached: a notice builds its session's paths three times, and pathlib's joins were a
    # tenth of a due wake's Python. A refusal raises, and is not cached.
    check_session_id(sid)
    if sid in (".", ".."):  # the id pattern admits these; as a path they escape the tree
        raise BadInput(f"invalid session id {sid!r}: '.' and '..' are not session ids")
    return home / FLOOR / sid


class Floor:
    """The inbox tree under ``home`` (``$INBOX_HOME``): write a line, append, drain, peek."""

    def __init__(self, home: Path, clock: Clock = SYSTEM, *, fsync: bool = False) -> None:
        self.home = Path(home)
        self.clock = clock
        # Each append and each log write reaches the disk before it returns (a power cut
        # keeps a notice recorded as written): on unless the deployment's durability is
        # ``memory`` (floor_sync).
        self.fsync = fsync

    # --- paths -------------------------------------------------------------------------

    def session_dir(self, sid: str, create: bool = False) -> Path:
        """``home/inbox/<sid>``; the id is checked before any path is built."""
        path = _inbox_dir(self.home, sid)
        if create:
            make_dirs(self.home, sid)
        return path

    def prepare(self, sid: str) -> Path:
        """The session's directory, with an empty queue file in it when it has none: a
        notice then appends to a file that exists. Making a file is the costly part of an
        append on a disk filesystem (the kernel's work for a new file is many times an
        append's), so the session's registration and each drain (the turn
        boundaries that empty the floor) make it, not the notice of a due wake, whose
        burst is what a swarm waits on. An empty queue file is an empty floor
        (``bus.lanes.entry.floor_is_empty``, :meth:`drain`)."""
        d = self.session_dir(sid, create=True)
        os.close(_open_private(d / MESSAGES, os.O_WRONLY | os.O_APPEND))
        return d

    def malformed_path(self, sid: str) -> Path:
        """Where a drain keeps the torn or malformed lines it skipped."""
        return self.session_dir(sid) / MALFORMED

    def socket_path(self, sid: str) -> Path:
        """Where a listening harness binds (``<dir>/inbox.sock``; a path too long for a
        socket address is bound through a short link, bus.local.unix_socket)."""
        return self.session_dir(sid) / SOCKET

    # --- writing -----------------------------------------------------------------------

    def write_line(
        self,
        sid: str,
        obj: dict[str, Any],
        *,
        connect_timeout: float = 0.2,
        ack_timeout: float = 1.0,
    ) -> tuple[Via, Path]:
        """Local precedence: the socket if a listener acks ``{"ok": true}``, else the file.

        Returns ``("socket", sock_path)`` or ``("file", messages_path)``. A late ack
        (after ``ack_timeout``) still lands the line on the file; the reference listener
        records what it took (``heard.jsonl``) and a drain skips it there (other
        listeners: lines carry ids for that).
        """
        data = encode_line(obj)
        sock = self.socket_path(sid)
        if self._send_socket(sock, data, connect_timeout, ack_timeout):
            return "socket", sock
        return "file", self._append_bytes(sid, data)

    def offer(self, sid: str, obj: dict[str, Any], *, ack_timeout: float = 1.0) -> bool:
        """Hand ``obj`` to the session's socket listener only (never the file): True when
        it acked ``{"ok": true}``. For a line the file already holds."""
        return self._send_socket(self.socket_path(sid), encode_line(obj), 0.2, ack_timeout)

    def append(self, sid: str, obj: dict[str, Any]) -> Path:
        """Append one line to ``messages.jsonl``, skipping the socket on purpose."""
        return self._append_bytes(sid, encode_line(obj))

    @staticmethod
    def _send_socket(path: Path, data: bytes, connect_timeout: float, ack_timeout: float) -> bool:
        try:
            st = os.stat(path, follow_symlinks=False)
        except OSError:
            return False
        # Only a socket of this user's: another user's (bound in a folder they made first)
        # would receive the line; the file floor then refuses their folder in words.
        if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.geteuid():
            return False
        try:
            # Through a short link when the path is longer than a socket address may be.
            sock = unix_socket.connect(path, connect_timeout)
        except OSError:  # refused, stale file, no short link: the file is the floor
            return False
        try:
            deadline = time.monotonic() + ack_timeout
            sock.settimeout(ack_timeout)
            sock.sendall(data)
            buf = b""
            while b"\n" not in buf:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                sock.settimeout(left)
                chunk = sock.recv(4096)
                if not chunk:
                    break
                buf += chunk
                if len(buf) > _ACK_MAX:
                    return False
            ack = _parse(buf.split(b"\n", 1)[0])
            return ack is not None and ack.get("ok") is True
        except OSError:  # refused, stale file, timeout, reset: the file is the floor
            return False
        finally:
            sock.close()

    def _append_bytes(self, sid: str, data: bytes) -> Path:
        path = self.session_dir(sid) / MESSAGES
        for _ in range(_APPEND_TRIES):
            try:
                check_parents(self.home)
                # Read too: the last byte says whether a torn line ends the file.
                fd = _open_private(path, os.O_RDWR | os.O_APPEND)
            except FileNotFoundError:
                # The session's directory made only when missing: its mkdirs are five
                # system calls a notice, each a GIL hand-off in a busy worker (a wake burst).
                self.session_dir(sid, create=True)
                fd = _open_private(path, os.O_RDWR | os.O_APPEND)
            try:
                fcntl.flock(fd, fcntl.LOCK_SH)
                # A drainer may have claimed the file between our open and our lock;
                # writing then would land in a file it already read.
                if _same_file(fd, path):
                    # A writer that died mid-line (no newline at the end) would have this
                    # line glued to its fragment and both lost as one malformed line.
                    _write_all(fd, b"\n" + data if torn_tail(fd) else data)
                    if self.fsync:
                        os.fdatasync(fd)
                    return path
            finally:
                os.close(fd)  # also releases the lock
        raise OSError(f"could not append to {path}: it kept being claimed")

    # --- reading -----------------------------------------------------------------------

    def drain(self, sid: str) -> DrainResult:
        """Take every pending line off the floor: orphaned claims first, then the queue.

        Good lines go to ``log.jsonl`` (last 500 kept); torn or malformed lines go to
        ``malformed.jsonl`` and are reported, never dropped. Missing dir → empty result.
        """
        result = DrainResult()
        d = self.session_dir(sid)
        if not d.is_dir():
            return result
        check_parents(self.home)
        claimed: list[tuple[Path, int]] = []
        try:
            for name in self._draining_names(d):
                got = self._claim_orphan(d, name)
                if got:
                    claimed.append(got)
            got = self._claim_queue(d)
            if got:
                claimed.append(got)
            # The next notice's file, made now (see prepare): a notice appends to it. Only
            # a saving: a failure (the directory removed meanwhile) leaves it to the notice.
            with contextlib.suppress(OSError):
                os.close(_open_private(d / MESSAGES, os.O_WRONLY | os.O_APPEND))
            if claimed:
                faults.point("drain:after_claim")
            good: list[bytes] = []
            bad: list[bytes] = []
            at = self.clock.now_ms()
            heard = heard_keys(d) if claimed else set()
            for path, fd in claimed:
                for raw in _read_fd(fd).split(b"\n"):
                    if not raw.strip():
                        continue
                    obj = _parse(raw)
                    if obj is None:
                        text = raw.decode("utf-8", "replace")
                        result.malformed.append(text)
                        bad.append(encode_line({"raw": text, "at": at, "source": path.name}))
                    else:
                        taken = line_key(obj) in heard
                        (result.heard if taken else result.lines).append(obj)
                        good.append(raw.rstrip(b"\r") + b"\n")
            if bad:
                append_private(d / MALFORMED, b"".join(bad), sync=self.fsync)
            if result.lines:
                # Heard once: what the model was handed already is not handed on again
                # (the caller records what it hands on: handed_on).
                result.lines, result.repeated = split_repeats(d, result.lines)
            if good:
                self._append_log(d, good)
                faults.point("drain:after_log")
            # Deleted only after the log is written: a crash before this re-delivers the
            # lines on the next drain (at least once) rather than losing them.
            for path, _fd in claimed:
                path.unlink(missing_ok=True)
        finally:
            for _path, fd in claimed:
                os.close(fd)
        return result

    def handed_on(self, sid: str, lines: list[dict[str, Any]]) -> None:
        """Record ``lines`` as handed to the session's model (bus.delivery.said): a drain's
        caller, once the drain's marks are recorded (a drainer killed before then has its
        notices carried again, and they must then be handed on)."""
        d = self.session_dir(sid)
        if lines and d.is_dir():
            record_said(d, lines, sync=self.fsync)

    def peek(self, sid: str) -> list[dict[str, Any]]:
        """Pending lines (orphaned claims, then the queue) without consuming them."""
        d = self.session_dir(sid)
        if not d.is_dir():
            return []
        out: list[dict[str, Any]] = []
        for path in [*(d / n for n in self._draining_names(d)), d / MESSAGES]:
            for raw in self._read_lines(path):
                obj = _parse(raw)
                if obj is not None:
                    out.append(obj)
        return out

    def pending_count(self, sid: str) -> int:
        """How many lines wait on the floor (the queue and every claim), not parsed."""
        d = self.session_dir(sid)
        if not d.is_dir():
            return 0
        paths = [*(d / n for n in self._draining_names(d)), d / MESSAGES]
        return sum(len(self._read_lines(p)) for p in paths)

    def pending_ids(self, sid: str) -> set[str]:
        """Ids of the lines still on the floor (the queue and every claim), not the log."""
        return {str(obj["id"]) for obj in self.peek(sid) if "id" in obj}

    def id_sender(self, sid: str, msg_id: str) -> tuple[str | None, str | None] | None:
        """The sender (``from_session``, ``from``) of the first line with ``msg_id`` the
        floor holds (heard by its listener, pending, or in its log); None if none does."""
        d = self.session_dir(sid)
        if not d.is_dir():
            return None
        for line in self._lines_with_id(d, msg_id):
            return (line.get("from_session") or None, line.get("from") or None)
        return None

    def _lines_with_id(self, d: Path, msg_id: str) -> Iterator[dict[str, Any]]:
        yield from (o for o in heard_lines(d) if o.get("id") == msg_id)
        needle = msg_id.encode("utf-8", "replace")
        for path in [*(d / n for n in self._draining_names(d)), d / MESSAGES, d / LOG]:
            for raw in self._read_lines(path):
                obj = _parse(raw) if needle in raw else None
                if obj is not None and obj.get("id") == msg_id:
                    yield obj

    def contains_id(self, sid: str, msg_id: str) -> bool:
        """Is a line with this ``id`` on the floor (queue, claims or log)? For recovery."""
        d = self.session_dir(sid)
        if not d.is_dir():
            return False
        needle = msg_id.encode("utf-8", "replace")
        paths = [*(d / n for n in self._draining_names(d)), d / MESSAGES, d / LOG]
        for path in paths:
            for raw in self._read_lines(path):
                if needle in raw and (obj := _parse(raw)) is not None and obj.get("id") == msg_id:
                    return True
        return False

    # --- internals ---------------------------------------------------------------------

    @staticmethod
    def _draining_names(d: Path) -> list[str]:
        try:
            names = [n for n in os.listdir(d) if n.startswith(DRAINING_PREFIX)]
        except FileNotFoundError:
            return []
        return sorted(names, key=_draining_key)

    @staticmethod
    def _read_lines(path: Path) -> list[bytes]:
        try:
            fd = open_read(path)
        except FileNotFoundError:
            return []
        try:
            data = _read_fd(fd)
        finally:
            os.close(fd)
        return [raw for raw in data.split(b"\n") if raw.strip()]

    @staticmethod
    def _claim_queue(d: Path) -> tuple[Path, int] | None:
        own = d / _draining_name()
        try:
            st = os.stat(d / MESSAGES, follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                os.close(open_read(d / MESSAGES))  # raises UnsafeFloor, in words
            if not st.st_size:
                return None  # nothing in it: a line appended from now on waits for the next
            os.rename(d / MESSAGES, own)  # the claim: later appends land in a fresh file
        except FileNotFoundError:
            return None
        try:
            fd = open_read(own)
        except FileNotFoundError:
            return None  # another drainer took it as an orphan before we locked it
        # Waits for appenders that opened the file before the rename to finish writing.
        fcntl.flock(fd, fcntl.LOCK_EX)
        if not _same_file(fd, own):
            os.close(fd)
            return None
        return own, fd

    @staticmethod
    def _claim_orphan(d: Path, name: str) -> tuple[Path, int] | None:
        try:
            fd = open_read(d / name)
        except FileNotFoundError:
            return None
        try:
            # A live drainer holds its claim locked; only a dead one's lock is free.
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        own = d / _draining_name()
        try:
            os.rename(d / name, own)  # now ours: no other drainer can take it too
        except FileNotFoundError:
            os.close(fd)
            return None
        if not _same_file(fd, own):
            os.close(fd)
            return None
        return own, fd

    def _append_log(self, d: Path, lines: list[bytes]) -> None:
        # The cap rewrites the log; the lock keeps two drainers from dropping each other's lines.
        lock_fd = _open_private(d / LOG_LOCK, os.O_RDWR)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
            log = d / LOG
            try:
                log_fd = open_read(log)
            except FileNotFoundError:
                old = b""
            else:
                try:
                    old = _read_fd(log_fd)
                finally:
                    os.close(log_fd)
            kept = [raw + b"\n" for raw in old.split(b"\n") if raw.strip()]
            if len(kept) + len(lines) <= LOG_KEEP:
                # A torn last line stays a line of its own instead of swallowing ours.
                prefix = b"\n" if old and not old.endswith(b"\n") else b""
                append_private(log, prefix + b"".join(lines), sync=self.fsync)
                return
            tail = (kept + lines)[-LOG_KEEP:]
            tmp = d / f".{LOG}.{os.getpid()}.{threading.get_ident()}.tmp"
            fd = _open_private(tmp, os.O_WRONLY | os.O_TRUNC)
            try:
                _write_all(fd, b"".join(tail))
                if self.fsync:
                    os.fdatasync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, log)
        finally:
            os.close(lock_fd)
