"""The write commands' warm start: ``send``, ``reply``, ``withdraw`` and ``decide`` run by the
full command line in a process that has already imported it.

Importing the library, typer, pydantic and redis-py costs a write command most of its
time, and no subset of it is enough to apply the send's rules (validation, id ownership,
rate limits, routing, the worker's kick, token checks). So ``inbox up`` keeps this server
running: it imports the command line and builds its click command once, listens on a unix
socket (:func:`socket_path`, owner-only) and forks :data:`WORKERS` workers that accept
clients one at a time. bus.lanes.send (called by the ``inbox`` entry point,
standard library only) connects and passes its stdin, stdout and stderr (``SCM_RIGHTS``),
its argv, environment, working directory and stdio encodings; the worker puts them in
place of its own and runs :func:`bus.surfaces.cli.app.prepared_runner`'s run on the argv:
the same code a cold ``inbox`` runs, so every answer, refusal and exit code is the cold
one's; then it puts its own back. Kept from one command to the next: the imported modules,
the built command and the store's client for the same store settings
(bus.store.connection.reuse_clients); everything else (the settings, the ``Bus``) is made
from the caller's environment each time.

The exchange (all on the one connection):

1. client: ``<length:10 ascii digits><header>`` with the three descriptors; the header is
   NUL-separated: ``COMMAND_MAGIC`` (bus.core.lane_names), the path of bus.core.lane_names as the client imported
   it and its interpreter (a server of another install answers ``full``), cwd, the stdin/stdout/stderr encodings and
   errors, the argv count, the argv, then ``KEY=VALUE`` environment entries;
2. worker: ``+`` (taken) or ``full`` (run it yourself; nothing ran): ``full`` for a
   client of another install or a command other than the ``WRITE_COMMANDS`` (bus.core.lane_names);
3. client: ``g`` (go). Only now does the command run: a client that gave up waiting for
   the ``+`` closes instead, and the worker, reading EOF, runs nothing. So a command runs
   once, here or in the client, never both;
4. worker: ``=<exit code>`` and a newline; then it takes its next client. If the client
   goes away first (its Ctrl-C), the command is interrupted (``KeyboardInterrupt``, as
   ``SIGINT`` would have interrupted the cold process; see :class:`_Watcher`), and the
   worker leaves once the command has ended.

Steps 1 and 3 are read by bus.surfaces.command_intake for all of a worker's connections
at once, each bounded (its ``TAKE_S``): an idle or stuck client holds no worker and
delays no other client's command. Only this user's clients are read (``SO_PEERCRED``).
"""

from __future__ import annotations

import fcntl
import io
import os
import queue
import signal
import socket
import struct
import sys
import threading
import traceback
from pathlib import Path
from typing import NamedTuple

from bus.core import lane_names
from bus.core.lane_names import COMMAND_MAGIC, WRITE_COMMANDS
from bus.core.locate import default_home
from bus.local.command_socket import command_socket_path
from bus.local.runtime_dir import private_folder
from bus.ops.procs import die_with_parent

from .command_intake import Intake

MAX_HEADER = 4 << 20  # bytes: argv and environment
WORKERS = 2  # commands served at once; a client finding all busy waits TAKE_S, then runs its own
REQUESTS = 1000  # commands a worker serves before a fresh fork replaces it


def socket_path(home: Path) -> Path:
    """The server's socket: beside the embedded Redis's (a path short enough for a unix
    socket whatever the home)."""
    return Path(command_socket_path(str(home)))


def client_id() -> tuple[bytes, bytes]:
    """What a client must match: bus.core.lane_names's file (one install, one file) and
    the interpreter."""
    return os.fsencode(lane_names.__file__), os.fsencode(sys.executable)


class Request(NamedTuple):
    """A client's header (see the module's docstring)."""

    client: bytes
    python: bytes
    cwd: bytes
    stdio: list[tuple[str, str]]  # (encoding, errors) of stdin, stdout, stderr
    argv: list[str]
    env: dict[bytes, bytes]


def parse_header(data: bytes) -> Request:
    """The client's header, parsed."""
    parts = data.split(b"\0")
    if len(parts) < 12 or parts[0] != COMMAND_MAGIC:
        raise ValueError("not an inbox command header")
    count = int(parts[10])
    argv = parts[11 : 11 + count]
    env = parts[11 + count :]
    if len(argv) != count:
        raise ValueError("short argv")
    return Request(
        client=parts[1],
        python=parts[2],
        cwd=parts[3],
        stdio=[(parts[4 + 2 * i].decode(), parts[5 + 2 * i].decode()) for i in range(3)],
        argv=[os.fsdecode(a) for a in argv],
        env=dict(kv.split(b"=", 1) for kv in env if b"=" in kv),
    )


def _stdio(fd: int, mode: str, encoding: str, errors: str) -> io.TextIOWrapper:
    """A text stream on ``fd`` as a starting interpreter makes one: stdout line-buffered
    on a terminal, stderr always line-buffered."""
    tty = os.isatty(fd)
    raw = io.FileIO(fd, mode, closefd=False)
    buf: io.BufferedReader | io.BufferedWriter = (
        io.BufferedReader(raw) if mode == "r" else io.BufferedWriter(raw)
    )
    line = mode == "w" and (fd == 2 or tty)
    return io.TextIOWrapper(buf, encoding=encoding, errors=errors, line_buffering=line)


class _Request:
    """One client's request, run in this worker with the caller's descriptors,
    environment and directory, and this worker's own put back afterwards."""

    def __init__(self, conn: socket.socket, run: object, watcher: _Watcher) -> None:
        self.conn, self.run, self.watcher = conn, run, watcher
        self.running = False
        self.gone = False
        self.lock = threading.Lock()

    def watch(self) -> None:
        """SIGINT this worker when the client goes away before its answer (its Ctrl-C),
        as the caller's own process would have been interrupted."""
        try:
            gone = self.conn.recv(1) == b""
        except OSError:
            gone = True
        with self.lock:
            if gone and self.running:
                self.gone = True
                os.kill(os.getpid(), signal.SIGINT)

    def serve(self, req: Request, fds: list[int]) -> int:
        """Run the request its client said go to (bus.surfaces.command_intake took it)
        on the client's descriptors ``fds``; its exit code."""
        saved = _Saved()
        try:
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
                os.close(fd)
            os.chdir(req.cwd)
            os.environb.clear()
            os.environb.update(req.env)
            enc = req.stdio
            sys.stdin = _stdio(0, "r", *enc[0])
            sys.stdout = _stdio(1, "w", *enc[1])
            sys.stderr = _stdio(2, "w", *enc[2])
            self.running = True
            try:
                self.watcher.watch(self)
                code = _run(self.run, req.argv)
            except KeyboardInterrupt:  # the client went away before its command began
                code = 130
            finally:
                with self.lock:
                    self.running = False
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except OSError:
                    pass
        finally:
            saved.restore()
        try:
            self.conn.sendall(b"=%d\n" % code)
            # Wakes the watcher's recv (a close would leave it blocked, the socket open).
            self.conn.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        return code


class _Watcher:
    """Interrupts the running command when its client goes away (:meth:`_Request.watch`).

    Where the platform has it, the kernel says so: the connection is set to signal
    ``SIGIO`` to this worker when it turns readable (the client's close), and the handler,
    run by the main thread between two steps of the command, raises
    :class:`KeyboardInterrupt` as ``SIGINT`` would have. Elsewhere one thread of the
    worker waits on each running request's connection in turn. Nothing is started per
    command: a thread's start, and its first grab of the interpreter lock, cost each
    command a hand-off between threads."""

    def __init__(self) -> None:
        self.current: _Request | None = None
        self.by_signal = all(
            hasattr(mod, name)
            for mod, name in ((fcntl, "F_SETOWN"), (os, "O_ASYNC"), (signal, "SIGIO"))
        )
        if self.by_signal:
            signal.signal(signal.SIGIO, self._on_io)
        else:
            self.requests: queue.SimpleQueue[_Request] = queue.SimpleQueue()
            threading.Thread(target=self._loop, name="client-watch", daemon=True).start()

    def watch(self, request: _Request) -> None:
        if not self.by_signal:
            self.requests.put(request)
            return
        self.current = request
        fd = request.conn.fileno()
        fcntl.fcntl(fd, fcntl.F_SETOWN, os.getpid())
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_ASYNC)
        self._on_io()  # a client gone before the flag was set sends no signal for it

    def _on_io(self, *_: object) -> None:
        request = self.current
        # Once a command: a later signal must not interrupt its unwinding.
        if request is None or not request.running or request.gone:
            return
        try:
            gone = request.conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return
        except OSError:
            gone = True
        if gone:
            request.gone = True
            raise KeyboardInterrupt

    def _loop(self) -> None:
        # A request that ended before its turn here finds its connection shut or closed:
        # its watch returns at once, and a request no longer running is never interrupted.
        while True:
            self.requests.get().watch()


class _Saved:
    """This worker's own descriptors 0-2, streams, environment and directory."""

    def __init__(self) -> None:
        self.fds = [os.dup(fd) for fd in (0, 1, 2)]
        self.streams = (sys.stdin, sys.stdout, sys.stderr)
        self.env = dict(os.environb)
        self.cwd = os.getcwd()

    def restore(self) -> None:
        sys.stdin, sys.stdout, sys.stderr = self.streams
        for target, fd in enumerate(self.fds):
            os.dup2(fd, target)
            os.close(fd)
        os.environb.clear()
        os.environb.update(self.env)
        os.chdir(self.cwd)


def _run(run: object, argv: list[str]) -> int:
    """``run(argv)`` with an interpreter's handling of what escapes it."""
    try:
        code = run(argv)  # type: ignore[operator]
    except SystemExit as done:
        code = done.code
    except KeyboardInterrupt:
        return 130
    except BaseException:
        traceback.print_exc()
        return 1
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def taken(data: bytes, fds: list[int]) -> Request | None:
    """The request in a whole header, or None (answered ``full``: the client runs it
    itself): a client of another install, or a command this server is not for."""
    try:
        req = parse_header(data)
    except (ValueError, UnicodeDecodeError, IndexError):
        return None
    if len(fds) != 3 or (req.client, req.python) != client_id():
        return None
    return req if req.argv[:1] and req.argv[0] in WRITE_COMMANDS else None


def _peer_is_owner(conn: socket.socket) -> bool:
    opt = getattr(socket, "SO_PEERCRED", None)
    if opt is None:
        return True  # the socket's mode (0600, in a 0700 folder) is the guard there
    _pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, opt, 12))
    return uid == os.getuid()


def serve(path: Path, stop: threading.Event | None = None) -> None:
    """Import and build the command line, then answer clients on ``path`` until SIGTERM."""
    import gc

    from bus.surfaces.cli.app import prepared_runner

    run = prepared_runner()
    private_folder(path.parent)  # under /tmp: this user's and 0700, or refused
    path.unlink(missing_ok=True)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        srv.bind(str(path))
    finally:
        os.umask(old)
    srv.listen(128)
    # What was imported is not scanned again by the workers' collections.
    gc.freeze()

    workers: set[int] = set()

    def bye(*_: object) -> None:
        path.unlink(missing_ok=True)
        for pid in workers:
            os.kill(pid, signal.SIGTERM)
        os._exit(0)

    signal.signal(signal.SIGTERM, bye)
    signal.signal(signal.SIGINT, bye)
    print(f"inbox commands: ready on {path}", flush=True)
    while True:
        while len(workers) < WORKERS:
            pid = os.fork()
            if pid == 0:
                _worker(srv, run)
            workers.add(pid)
        pid, _status = os.wait()
        workers.discard(pid)


def _worker(srv: socket.socket, run: object) -> None:
    """A forked worker: serve clients one at a time; leave after :data:`REQUESTS` (a
    fresh fork drops what runs left behind), or once a client went away mid-command."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    die_with_parent()
    intake: Intake | None = None
    watcher: _Watcher | None = None
    try:
        watcher = _Watcher()
        intake = Intake(srv, owner=_peer_is_owner, accept=taken, max_header=MAX_HEADER)
        for _ in range(REQUESTS):
            conn, request, fds = intake.next()
            with conn:
                req = _Request(conn, run, watcher)
                req.serve(request, fds)  # type: ignore[arg-type]
            if req.gone:
                break
    except KeyboardInterrupt:
        pass  # a client's Ctrl-C that landed after its command: this worker leaves
    except BaseException:
        traceback.print_exc()
    finally:
        _leave(intake, run, watcher)


def _leave(intake: Intake | None, run: object, watcher: _Watcher | None) -> None:
    """Run what this worker already took (answered ``+``: its client runs it no more),
    then end the process."""
    try:
        if intake is not None and watcher is not None:
            for conn, request, fds in intake.finish():
                with conn:
                    _Request(conn, run, watcher).serve(request, fds)  # type: ignore[arg-type]
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(0)


def main() -> None:
    from bus.local.runtime_dir import UnsafeFolder

    try:
        serve(socket_path(default_home()))
    except UnsafeFolder as exc:
        print(f"inbox commands: {exc}", file=sys.stderr, flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
