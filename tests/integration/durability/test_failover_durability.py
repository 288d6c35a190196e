"""With ``replica`` durability, a primary killed after acknowledged sends and its replica
promoted loses none of them: the replication link is stalled first (a paused TCP hop), so
the replica has only what it acknowledged. With ``memory`` the same failover loses the
sends made while the link stalled, acknowledged all the same."""

from __future__ import annotations

import select
import socket
import threading
from dataclasses import replace
from pathlib import Path

import pytest
import redis

from bus.api import Bus
from bus.core.errors import NotDurable
from bus.core.settings import Settings
from bus.delivery.dispatch import RecordingDispatcher
from tests.support.durable_servers import server, waitaof_binary
from tests.support.local_servers import free_port
from tests.support.waiting import wait_for


class PausableHop:
    """A TCP hop (one client at a time) to ``target``; paused, it reads nothing either way,
    so what is sent waits in the kernel's buffers and dies with the hop."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.port = free_port()
        self.listener = socket.create_server(("127.0.0.1", self.port))
        self.running = threading.Event()
        self.running.set()
        self.closed = False
        self.socks: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target))
            except OSError:  # the primary is gone: the replica finds no one
                client.close()
                continue
            self.socks += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        peer = {a: b, b: a}
        while not self.closed:
            self.running.wait(0.1)
            if not self.running.is_set():
                continue
            try:
                ready, _, _ = select.select([a, b], [], [], 0.1)
                for s in ready:
                    data = s.recv(65536)
                    if not data:
                        return
                    peer[s].sendall(data)
            except OSError:
                return

    def close(self) -> None:
        self.closed = True
        for s in [self.listener, *self.socks]:
            s.close()


def test_replica_durability_survives_a_failover_memory_does_not(
    settings: Settings, tmp_path: Path
) -> None:
    binary = waitaof_binary()
    with server(binary, tmp_path / "p") as (purl, primary):
        hop = PausableHop(int(purl.rsplit(":", 1)[1].split("/")[0]))
        try:
            with server(binary, tmp_path / "r", "--replicaof", "127.0.0.1", str(hop.port)) as (
                rurl,
                _replica,
            ):
                replica = redis.Redis.from_url(rurl, decode_responses=True)
                wait_for(
                    lambda: replica.info("replication")["master_link_status"] == "up",
                    20,
                    "the replica's link",
                )
                s = replace(settings, redis_url=purl, broker_url=purl, durability_timeout_s=0.5)
                b = Bus(s, dispatcher=RecordingDispatcher())
                b.open_session("alice", handle="hosta:alice")
                b.open_session("bob", handle="hosta:bob")
                kept = []
                for i in range(50):
                    a = b.send(
                        {
                            "from": "hosta:alice",
                            "to": "hosta:bob",
                            "text": f"r{i}",
                            "id": f"rep-{i}",
                        },
                        durability="replica",
                    )
                    assert a["durable"] == "replica"
                    kept.append(a["id"])
                hop.running.clear()  # the link stalls
                with pytest.raises(NotDurable):
                    b.send(
                        {"from": "hosta:alice", "to": "hosta:bob", "text": "x", "id": "rep-x"},
                        durability="replica",
                    )
                lost_ok = [
                    b.send(
                        {
                            "from": "hosta:alice",
                            "to": "hosta:bob",
                            "text": f"m{i}",
                            "id": f"mem-{i}",
                        },
                        durability="memory",
                    )["id"]
                    for i in range(20)
                ]
                primary.kill()
                primary.wait(10)
                hop.close()
                replica.replicaof("NO", "ONE")  # promoted
                after = Bus(
                    replace(s, redis_url=rurl, broker_url=rurl), dispatcher=RecordingDispatcher()
                )
                have = after.store.queue.first_answers("bob", kept + lost_ok)
                assert all(have[: len(kept)]), "a replica-acknowledged send was lost"
                assert not any(have[len(kept) :]), "the stalled link carried memory sends"
        finally:
            hop.close()
