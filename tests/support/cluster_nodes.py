"""A password-protected Redis Cluster with replicas, and a standalone broker, on one address.

For ``bench/swarm_hosts.py``: the same redis-server binary the bus embeds
(:func:`bus.ops.embedded.server_binary`), started with ``--cluster-enabled yes`` like the
suite's cluster fixture (:class:`bus.ops.embedded.EmbeddedCluster`), here with a replica per
master (``CLUSTER REPLICATE``), ``requirepass``/``masterauth`` and the server's stock memory
settings unless ``memory_args`` (what a managed cluster gives). Every node listens on
``address`` (the bridge the host namespaces reach) and announces it.

:meth:`ReplicatedCluster.kill_master` SIGKILLs the master of a slot and
:meth:`ReplicatedCluster.wait_promoted` waits for its replica to take over; the killed node
is started again later (:meth:`restart_node`) and rejoins as a replica.
"""

from __future__ import annotations

import secrets
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import redis

from bus.ops.embedded import MEMORY_ARGS, server_binary
from bus.ops.procs import die_with_parent
from tests.support.local_servers import free_cluster_ports

SLOTS = 16384


def wait_for(what: str, deadline: float, check: Any, every: float = 0.05) -> Any:
    while True:
        try:
            got = check()
            if got:
                return got
        except (redis.RedisError, OSError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not happen in time")
        time.sleep(every)


class Node:
    """One redis-server child; restartable on its port with its data dir."""

    def __init__(self, address: str, port: int, data: Path, args: list[str]) -> None:
        self.address, self.port, self.data, self.args = address, port, data, args
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.data.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.proc = subprocess.Popen(
            [server_binary(), "--port", str(self.port), "--bind", self.address, *self.args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent,  # a killed bench leaves no Redis behind
        )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def _common(data: Path, password: str) -> list[str]:
    return [
        *("--dir", str(data), "--daemonize", "no", "--loglevel", "warning"),
        *("--logfile", str(data / "redis.log"), "--requirepass", password),
        *("--masterauth", password, "--save", ""),
    ]


class Broker(Node):
    """The Celery broker: a standalone Redis (kombu has no cluster transport), AOF on."""

    def __init__(self, address: str, data: Path, password: str) -> None:
        port = free_cluster_ports(1)[0]
        args = [*_common(data, password), "--appendonly", "yes", "--appendfsync", "everysec"]
        super().__init__(address, port, data, args)
        self.url = f"redis://:{password}@{address}:{port}/0"

    def start_and_wait(self, timeout: float = 30.0) -> None:
        self.start()
        client = redis.Redis.from_url(self.url, socket_connect_timeout=0.5)
        wait_for("the broker's ping", time.monotonic() + timeout, client.ping)
        client.close()


class ReplicatedCluster:
    """``masters`` masters with ``replicas`` replicas each; see the module docstring."""

    def __init__(
        self,
        data: Path,
        address: str,
        *,
        masters: int = 3,
        replicas: int = 1,
        node_timeout_ms: int = 5000,
        memory_args: bool = False,
    ) -> None:
        self.address = address
        self.password = secrets.token_hex(16)
        self.masters = masters
        ports = free_cluster_ports(masters * (1 + replicas))
        extra = list(MEMORY_ARGS) if memory_args else []
        self._moves: dict[int, int] = {}  # a port's node: how often it was moved at start
        self.nodes = [
            Node(
                address,
                port,
                data / str(port),
                [
                    *_common(data / str(port), self.password),
                    *("--cluster-enabled", "yes", "--appendonly", "yes"),
                    *("--cluster-config-file", str(data / str(port) / "nodes.conf")),
                    *("--cluster-node-timeout", str(node_timeout_ms)),
                    *extra,
                ],
            )
            for port in ports
        ]

    @property
    def url(self) -> str:
        """A URL naming every node (bus.store.cluster.split_nodes): a process starting
        while one of them is down (a killed master) connects through another."""
        where = ",".join(f"{self.address}:{node.port}" for node in self.nodes)
        return f"redis://:{self.password}@{where}/0"

    def client(self, node: Node, timeout: float = 1.0) -> redis.Redis:
        return redis.Redis(
            host=self.address,
            port=node.port,
            password=self.password,
            socket_connect_timeout=timeout,
            socket_timeout=timeout * 2,
            decode_responses=True,
        )

    def start(self, timeout: float = 60.0) -> ReplicatedCluster:
        deadline = time.monotonic() + timeout
        for node in self.nodes:
            node.start()
        try:
            for node in self.nodes:
                wait_for("a cluster node's ping", deadline, lambda node=node: self._answers(node))
            clients = [self.client(n) for n in self.nodes]
            heads = clients[: self.masters]
            per = SLOTS // self.masters
            for i, c in enumerate(heads):
                end = SLOTS if i == self.masters - 1 else (i + 1) * per
                c.execute_command("CLUSTER ADDSLOTS", *range(i * per, end))
                c.execute_command("CLUSTER SET-CONFIG-EPOCH", i + 1)
            for node in self.nodes[1:]:
                clients[0].execute_command("CLUSTER MEET", self.address, node.port)
            ids = [c.execute_command("CLUSTER MYID") for c in heads]
            for n, c in enumerate(clients[self.masters :]):
                master_id = ids[n % self.masters]
                wait_for(
                    "a replica learning its master",
                    deadline,
                    lambda c=c, m=master_id: _knows(c, m),
                )
                c.execute_command("CLUSTER REPLICATE", master_id)
            wait_for("cluster_state:ok with every replica in sync", deadline, self.settled)
        except BaseException:
            self.stop()
            raise
        return self

    def _answers(self, node: Node) -> bool:
        """Whether a node just started answers its ping. One that exited first (its port
        taken by another process between the choice and its bind) starts again on other
        ports, at most a few times: a wait on it would only run out."""
        if node.alive():
            return bool(self.client(node).ping())
        moves = self._moves.get(node.port, 0)
        log = node.data / "redis.log"
        if moves >= 5:
            tail = log.read_text(errors="replace")[-500:] if log.exists() else ""
            raise RuntimeError(f"a cluster node exited at its start {moves + 1} times: {tail}")
        taken = [n.port for n in self.nodes]
        port = free_cluster_ports(1, taken=[*taken, *(p + 10000 for p in taken)])[0]
        self._moves[port] = moves + 1
        (node.data / "nodes.conf").unlink(missing_ok=True)  # it names the old port
        node.port = port
        node.start()
        return False

    def roles(self) -> dict[int, dict[str, Any]]:
        """Per live node's port: ``{"role", "id", "master_id", "slots"}`` as it sees itself."""
        out: dict[int, dict[str, Any]] = {}
        for node in self.nodes:
            if not node.alive():
                continue
            try:
                raw = self.client(node).execute_command("CLUSTER NODES")
            except (redis.RedisError, OSError):
                continue
            for addr, info in raw.items():
                if "myself" in info.get("flags", ""):
                    out[node.port] = {
                        "role": "master" if "master" in info["flags"] else "replica",
                        "id": info["node_id"],
                        "master_id": info.get("master_id"),
                        "slots": info.get("slots") or [],
                        "addr": addr,
                    }
        return out

    def settled(self) -> bool:
        """Every live node says ok; every slot's master has a replica in sync."""
        live = [n for n in self.nodes if n.alive()]
        for node in live:
            info = self.client(node).execute_command("CLUSTER INFO")
            if info.get("cluster_state") != "ok":
                return False
        roles = self.roles()
        masters = [r for r in roles.values() if r["role"] == "master" and r["slots"]]
        if len(masters) != self.masters:
            return False
        for port, r in roles.items():
            if r["role"] == "replica":
                node = next(n for n in self.nodes if n.port == port)
                rep = self.client(node).info("replication")
                if rep.get("master_link_status") != "up":
                    return False
        return len(roles) == len(live)

    def master_of(self, key: str) -> Node:
        """The node serving ``key``'s slot now."""
        slot = int(self.client(self.nodes[0]).execute_command("CLUSTER KEYSLOT", key))
        for node in self.nodes:
            if not node.alive():
                continue
            shards = self.client(node).execute_command("CLUSTER SLOTS")
            for start, end, primary, *_ in shards:
                if int(start) <= slot <= int(end):
                    port = int(primary[1])
                    return next(n for n in self.nodes if n.port == port)
        raise RuntimeError(f"no node serves {key!r}")

    def kill_master(self, node: Node) -> str:
        """SIGKILL ``node`` (a master); returns its node id, for :meth:`wait_promoted`."""
        node_id = str(self.client(node).execute_command("CLUSTER MYID"))
        node.stop(signal.SIGKILL)
        return node_id

    def wait_promoted(self, dead_id: str, timeout: float = 60.0) -> Node:
        """Until a replica of ``dead_id`` is master and the cluster says ok; that node."""
        deadline = time.monotonic() + timeout

        def promoted() -> Node | None:
            roles = self.roles()
            for port, r in roles.items():
                if r["role"] == "master" and r["slots"] and r["id"] != dead_id:
                    node = next(n for n in self.nodes if n.port == port)
                    info = self.client(node).execute_command("CLUSTER INFO")
                    masters = [x for x in roles.values() if x["role"] == "master" and x["slots"]]
                    if len(masters) == self.masters and info.get("cluster_state") == "ok":
                        return node
            return None

        return wait_for("the replica's promotion", deadline, promoted, every=0.02)

    def restart_node(self, node: Node, timeout: float = 60.0) -> None:
        """Start a killed node again; it rejoins (as a replica of its old slots' new master)."""
        node.start()
        wait_for("the restarted node's ping", time.monotonic() + timeout, self.client(node).ping)

    def memory(self) -> dict[str, int]:
        """``used_memory`` summed over the masters, and over every node."""
        roles = self.roles()
        masters = sum_all = 0
        for node in self.nodes:
            if not node.alive():
                continue
            used = int(self.client(node).info("memory")["used_memory"])
            sum_all += used
            if roles.get(node.port, {}).get("role") == "master":
                masters += used
        return {"masters": masters, "all": sum_all}

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


def _knows(client: redis.Redis, node_id: str) -> bool:
    return any(
        i.get("node_id") == node_id for i in client.execute_command("CLUSTER NODES").values()
    )


__all__ = ["Broker", "Node", "ReplicatedCluster"]
