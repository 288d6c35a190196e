"""The background waiter: how an idle harness session hears its wake with no keystroke.

``inbox hook claude wait`` is installed as a Claude Code ``Stop`` hook with
``"asyncRewake": true``: Claude Code runs it in the background when a turn ends, and when it
exits with code 2 it starts a turn whose context carries the hook's stderr. The waiter is
the session's listener on ``inbox.sock`` (the harness contract's socket) while the session
is idle, so the bus's one wake engine decides everything: which messages may wake, the
debounce, the flush. When the engine delivers a notice, the waiter writes its text on
stderr, acks it (the ack is what marks it heard, as for any listener) and exits 2.

It blocks in one ``select`` (the socket, a signal pipe, Claude Code's pid as a pidfd) and
uses no CPU while it waits but a look every :data:`CHECK_S` that its socket is still
there: one whose session folder was removed is bound again (said on stderr and in
``waiter.log``), or, when it cannot be, the waiter exits 1 saying why. It exits 0 quietly when:

- a newer waiter starts, a turn starts or the session ends (the hook that saw it sends
  SIGTERM: :func:`stop_waiter`), or Claude Code sends SIGTERM at the hook's timeout;
- Claude Code's process is gone;
- it reached its bound (:data:`WAIT_BOUND_S`, under the hook's timeout).

One waiter per session: each holds ``waiter.lock`` in the session's floor folder for its
life and writes its pid beside it; a new one stops the holder before it listens.

A waiter killed before it acked leaves the notice unacked: the bus puts it on the file floor,
unconfirmed, and the next drain (the next turn's first hook) or the next waiter takes it.
A notice the engine wakes for from the file floor (a steer written as the turn ended) comes
to the socket too; the waiter then drains the floor, which confirms it, and hands that over.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import select
import signal
import socket
import sys
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from bus.delivery.floor import SOCKET
from bus.delivery.said import read_said, unsaid
from bus.local import unix_socket

if TYPE_CHECKING:
    from bus.api import Bus

LOCK = "waiter.lock"
PID = "waiter.pid"
# Claude Code kills a background hook with SIGTERM once its "timeout" (seconds) has passed;
# node's timers cap at 2**31-1 ms, so a week is well inside. The waiter leaves a minute
# before, on its own, so it is never killed with a line in hand.
WAIT_TIMEOUT_S = 7 * 24 * 3600
WAIT_BOUND_S = WAIT_TIMEOUT_S - 60
# A waiter being replaced gets this long to let go of the lock.
SUPERSEDE_S = 3.0
_READ_S = 1.0  # the bus's sender waits 1 s for the ack
# How often the waiter checks that its socket path still names its socket (a session
# folder removed under it would leave it waiting where no notice can reach it).
CHECK_S = 2.0


LOG = "waiter.log"
_LOG_MAX = 64 * 1024


def _warn(message: str) -> None:
    sys.stderr.write(f"inbox wait: {message}\n")


def note(session_dir: Path, message: str) -> None:
    """One line in the session's ``waiter.log`` (what a person reads when no wake came)."""
    path = session_dir / LOG
    try:
        if path.exists() and path.stat().st_size > _LOG_MAX:
            path.write_text("")
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "a", encoding="utf-8") as f:
            f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} pid {os.getpid()} {message}\n")
    except OSError:
        pass


def _holder(lock_fd: int) -> bool:
    """True when another process holds the lock on ``lock_fd``'s file (a live waiter)."""
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    fcntl.flock(lock_fd, fcntl.LOCK_UN)
    return False


def stop_waiter(session_dir: Path, timeout: float = SUPERSEDE_S) -> bool:
    """Stop the session's waiter, if one is live; True when one was stopped in time.

    The pid file is trusted only while its lock is held, so a stale file never gets a
    recycled pid signalled."""
    lock, pidfile = session_dir / LOCK, session_dir / PID
    if not lock.exists():
        return False
    fd = os.open(lock, os.O_RDWR | os.O_CLOEXEC)
    try:
        if not _holder(fd):
            return False
        try:
            pid = int(pidfile.read_text().strip())
        except (OSError, ValueError):
            return False
        if pid == os.getpid():
            return False
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _holder(fd):  # a bounded hand-over, not an idle loop
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True
    finally:
        os.close(fd)


def _take_lock(session_dir: Path) -> int | None:
    """The waiter's lock, after stopping the waiter that held it; None if it would not go."""
    fd = os.open(session_dir / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd
    except BlockingIOError:
        pass
    stop_waiter(session_dir)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd
    except BlockingIOError:
        os.close(fd)
        return None


def _bind(path: Path) -> tuple[socket.socket | None, str]:
    """Listen on ``path`` (through a short link when it is too long for a socket
    address); ``(None, why)`` when another live listener is there (its lines stay its) or
    the socket cannot be had."""
    try:
        if unix_socket.live(path):
            return None, f"another listener is live on {path}; not waiting"
        return unix_socket.listen(path, 16), "listening"
    except OSError as exc:  # Unreachable says why in words, with its fix
        return None, f"cannot listen on {path}: {exc}; wakes stay off for this session"


def _read_line(conn: socket.socket) -> dict[str, Any] | None:
    conn.settimeout(_READ_S)
    buf = b""
    try:
        while b"\n" not in buf and len(buf) < (1 << 20):
            chunk = conn.recv(65536)
            if not chunk:
                break
            buf += chunk
    except OSError:
        return None
    try:
        obj = json.loads(buf.split(b"\n", 1)[0])
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def _ack(conn: socket.socket, ok: bool) -> None:
    with contextlib.suppress(OSError):
        conn.sendall(b'{"ok": true}\n' if ok else b'{"ok": false}\n')


def _inode(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _pidfd(pid: int | None) -> int | None:
    if not pid or pid <= 1 or not hasattr(os, "pidfd_open"):
        return None
    try:
        return os.pidfd_open(pid)
    except OSError:
        return None


class Waiter:
    """One armed waiter for ``sid``: :meth:`run` blocks until it hands a notice over."""

    def __init__(
        self,
        bus: Bus,
        sid: str,
        *,
        bound_s: float = WAIT_BOUND_S,
        parent_pid: int | None = None,
        out: IO[str] | None = None,
    ) -> None:
        self.bus, self.sid, self.bound_s = bus, sid, bound_s
        self.parent_pid = parent_pid
        self.out = out if out is not None else sys.stderr
        self.dir = bus.floor.session_dir(sid, create=True)
        self.why = "not started"
        self.server: socket.socket | None = None
        self.inode: tuple[int, int] | None = None

    def run(self) -> int:
        """2 with the notice written to ``out``; 0 when it ends without one; 1 when its
        socket vanished and could not be bound again (said on stderr and in
        ``waiter.log``)."""
        lock = _take_lock(self.dir)
        if lock is None:
            note(self.dir, "the earlier waiter did not stop; not waiting")
            return 0
        (self.dir / PID).write_text(f"{os.getpid()}\n")
        sig_r, sig_w = os.pipe()
        os.set_blocking(sig_w, False)
        previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
        old_fd = signal.set_wakeup_fd(sig_w)
        for s in previous:
            signal.signal(s, lambda *_: None)  # the wakeup fd carries it to the select
        path = self.dir / SOCKET
        server, said = _bind(path)
        if server is None:
            _warn(said)
            self.why = said
        pidfd = _pidfd(self.parent_pid)
        self.server = server
        self.inode = _inode(path) if server is not None else None
        note(self.dir, said)
        code = 0
        try:
            code = 0 if server is None else self._wait(sig_r, pidfd)
            return code
        finally:
            note(self.dir, f"exit {code}: {self.why}")
            if self.server is not None:
                self.server.close()
                with contextlib.suppress(OSError):
                    if _inode(path) == self.inode:
                        os.unlink(path)  # a newer listener's socket is not ours to remove
            signal.set_wakeup_fd(old_fd)
            for s, h in previous.items():
                signal.signal(s, h)
            for fd in (sig_r, sig_w, pidfd):
                if fd is not None:
                    os.close(fd)
            with contextlib.suppress(OSError):
                if (self.dir / PID).read_text().strip() == str(os.getpid()):
                    (self.dir / PID).unlink()
            os.close(lock)  # releases the lock

    def _wait(self, sig_r: int, pidfd: int | None) -> int:
        deadline = time.monotonic() + self.bound_s
        while True:
            server = self.server
            assert server is not None
            watched: list[Any] = [server, sig_r] + ([pidfd] if pidfd is not None else [])
            left = deadline - time.monotonic()
            if left <= 0:
                self.why = "bound reached"
                return 0
            ready, _, _ = select.select(watched, [], [], min(left, CHECK_S))
            if not ready and _inode(self.dir / SOCKET) != self.inode:
                if not self._bind_again():
                    return 1
                continue
            if sig_r in ready:
                self.why = "stopped (a newer waiter, a turn start, the session's end)"
                return 0
            if pidfd is not None and pidfd in ready:
                self.why = "the harness exited"
                return 0
            if server not in ready:
                continue
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                text = self._take(conn)
            if text:
                self.why = "handed a notice over"
                return 2

    def _bind_again(self) -> bool:
        """The socket path vanished (the session's folder removed) or names another
        socket: bind it again, or say why not (stderr, ``waiter.log``) and end: a waiter
        is never deaf in silence."""
        path = self.dir / SOCKET
        with contextlib.suppress(OSError):
            self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        server, said = _bind(path)
        if server is None:
            self.why = f"{path} vanished and could not be bound again: {said}"
            _warn(self.why)
            return False
        assert self.server is not None
        self.server.close()
        self.server, self.inode = server, _inode(path)
        message = f"{path} vanished (its session folder removed?); listening again"
        _warn(message)
        note(self.dir, message)
        return True

    def _take(self, conn: socket.socket) -> str | None:
        """Hand one line over: the notice's text on ``out``, then the ack. A raw line (a
        closed session's, or with the inbox switched off) is refused: it stays on the file
        for the next turn's drain."""
        line = _read_line(conn)
        if line is None or line.get("kind") != "notice" or not isinstance(line.get("id"), str):
            if line is not None:
                _ack(conn, False)
            return None
        fresh: list[dict[str, Any]] = []
        if self.bus.floor.contains_id(self.sid, line["id"]):
            # Already on the file floor (the engine's wake for a notice no drain took):
            # the drain confirms it and takes what else waits there with it.
            text = self.bus.drain(self.sid, stamped=True)
        else:
            # Heard once: a notice repeating only what the model was handed stays unsaid.
            kept = unsaid(line, read_said(self.dir))
            fresh = [kept] if kept is not None else []
            text = self.bus.render(fresh) if fresh else ""
        text = text.strip() if isinstance(text, str) else ""
        if not text:
            _ack(conn, True)
            return None
        self.out.write(text + "\n")
        self.out.flush()
        _ack(conn, True)
        with contextlib.suppress(OSError):
            self.bus.floor.handed_on(self.sid, fresh)
        return text


# The oldest Claude Code checked to run asyncRewake hooks in the background.
REWAKE_SINCE = (2, 1, 197)


def claude_version(agent: str | None) -> tuple[int, ...] | None:
    """The version Claude Code names itself by in ``AI_AGENT`` (``claude-code_2-1-332_...``)."""
    found = re.match(r"claude-code_(\d+)-(\d+)-(\d+)", agent or "")
    return tuple(int(x) for x in found.groups()) if found else None


def claude_supports_rewake(agent: str | None) -> bool:
    """Whether the Claude Code that runs this hook runs ``asyncRewake`` hooks in the
    background. One that does not would hold the turn's end while the waiter waits, so
    then the waiter does not wait at all."""
    version = claude_version(agent)
    return version is not None and version >= REWAKE_SINCE


def wait_entry(sid: str, bus: Bus, env: dict[str, str] | None = None) -> int:
    """``inbox hook claude wait``: arm the waiter for ``sid`` (see the module's summary)."""
    env = dict(os.environ) if env is None else env
    if not claude_supports_rewake(env.get("AI_AGENT")):
        return 0
    if (env.get("CLAUDE_CODE_ENTRYPOINT") or "").startswith("sdk"):
        # Headless (``claude -p``, the SDKs): the process ends with its turn, and it
        # waits for background hooks before it does, so a waiter would only hold it.
        return 0
    try:
        parent = int(env.get("CLAUDE_PID") or os.getppid())
    except ValueError:
        parent = os.getppid()
    code = Waiter(bus, sid, parent_pid=parent).run()
    if code == 2:
        handed_over()
    return code


def handed_over() -> None:
    """End the process now with code 2: the notice is on stderr and acked, the socket, pid
    file and lock are let go, so nothing is left to do. Claude Code starts the turn when
    the process exits, and the interpreter's teardown (collecting and freeing every module
    of the bus) is most of the wake's lateness on a loaded machine; so it is
    skipped (``os._exit``) once the standard streams and logs are flushed."""
    with contextlib.suppress(Exception):
        logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(2)


__all__ = ["WAIT_BOUND_S", "WAIT_TIMEOUT_S", "Waiter", "stop_waiter", "wait_entry"]
