"""Loopback servers for the tests and the benches: free ports, and a Redis Cluster of
redis-server children (the binary ``inbox up`` embeds), joined without redis-cli."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Collection, Iterator
from contextlib import ExitStack
from pathlib import Path

import redis

from bus.ops.embedded import MEMORY_ARGS, EmbeddedRedis, server_binary
from bus.store.server_probe import ClusterNode


def ephemeral_range() -> tuple[int, int]:
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

    low, high = ephemeral_range()
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


def free_cluster_ports(count: int, taken: Collection[int] = ()) -> list[int]:
    """``count`` free loopback ports ``p`` with ``p + 10000`` (the cluster bus port) free
    too, both outside the kernel's ephemeral range and none in ``taken``.

    An ephemeral port may be taken by any process's outgoing connection between this check
    and the server's bind (a loaded machine running other suites makes thousands): the
    server then exits with "address in use" and never answers.
    """
    import random
    import socket

    low, high = ephemeral_range()
    candidates = [
        p
        for p in range(10000, 55535)
        if not low <= p <= high and not low <= p + 10000 <= high
        if p not in taken and p + 10000 not in taken
    ] or [p for p in range(10000, 55535) if p not in taken]  # a range that leaves none
    rnd = random.Random()
    ports: list[int] = []
    for _ in range(200 * count):
        port = rnd.choice(candidates)
        if port in ports or port + 10000 in ports or port - 10000 in ports:
            continue
        try:
            for p in (port, port + 10000):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", p))
        except OSError:
            continue
        ports.append(port)
        if len(ports) == count:
            return ports
    raise RuntimeError("no free loopback cluster ports outside the ephemeral range")


class EmbeddedCluster:
    """A Redis Cluster of ``masters`` redis-server children on loopback ports (no replicas).

    The same binary as :class:`bus.ops.embedded.EmbeddedRedis`, started with
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


def stock_binary() -> str:
    """``INBOX_SERVER_BINARY`` (bench/cost.py --server-binary), else the redis-server on
    PATH, else the embedded one."""
    chosen = os.environ.get("INBOX_SERVER_BINARY")
    if chosen:
        return chosen
    found = shutil.which("redis-server")
    if found:
        return found
    from bus.ops.embedded import server_binary

    return server_binary()


def stock_server(tmp: Path, stack: ExitStack) -> str:
    """A redis-server with its defaults but for its port, dir and no persistence."""
    port = free_port()
    d = tmp / f"redis-{port}"
    d.mkdir(parents=True)
    args = [stock_binary(), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(d)]
    args += ["--save", "", "--appendonly", "no", "--daemonize", "no"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stack.callback(_stop, proc)
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    deadline = time.monotonic() + 20
    while not _pings(client):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the stock server on {port} does not answer")
        time.sleep(0.05)
    client.close()
    return url


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    proc.wait(10)


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


@contextlib.contextmanager
def own_redis_server() -> Iterator[str]:
    """Start a throw-away redis-server on a free loopback port; yield its URL.

    The embedded server on TCP requires its generated password, so the URL carries it.
    Its temporary folder (socket, password file) is removed however the block ends.
    """
    tmp = Path(tempfile.mkdtemp(prefix="inbox-test-redis-"))
    try:
        # TCP, not the unix socket: Celery's broker URL and the bus store URL then agree.
        server = EmbeddedRedis(tmp / "redis.sock", tmp / "data", port=free_port(), persist=False)
        with server:
            yield server.tcp_url
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
