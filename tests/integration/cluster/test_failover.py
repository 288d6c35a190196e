"""The store on a Redis Cluster whose master fails over to its replica mid-call.

A 3-master cluster with one replica each (tests/support/cluster_nodes.py, on loopback, a short
``cluster-node-timeout``), started per test; the Celery broker stays the suite's Redis.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bus.api import Bus
from bus.core.errors import Unavailable
from bus.core.settings import Settings
from bus.delivery.dispatch import RecordingDispatcher
from tests.support.cluster_nodes import ReplicatedCluster
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def replicated(tmp_path: Path) -> Iterator[ReplicatedCluster]:
    cluster = ReplicatedCluster(tmp_path / "cluster", "127.0.0.1", node_timeout_ms=1000)
    cluster.start(timeout=120)
    try:
        yield cluster
    finally:
        cluster.stop()


def test_a_node_whose_port_was_taken_before_its_start_starts_on_another(tmp_path: Path) -> None:
    cluster = ReplicatedCluster(tmp_path / "cluster", "127.0.0.1", masters=1, replicas=1)
    node = cluster.nodes[0]
    first = node.port
    with socket.socket() as taken:  # another process's connection, in the real case
        taken.bind(("127.0.0.1", first))
        taken.listen()
        cluster.start(timeout=60)
    try:
        assert node.port != first and node.alive()
        assert cluster.settled()
    finally:
        cluster.stop()


def _retrying(call: Callable[[], Any], bound_s: float = 60.0) -> Any:
    """A call the test itself makes while the cluster settles (bounded)."""
    deadline = time.monotonic() + bound_s
    while True:
        try:
            return call()
        except Unavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@pytest.mark.timeout(300)
def test_a_waited_send_waits_on_through_a_master_failover(
    settings: Settings, replicated: ReplicatedCluster
) -> None:
    s = replace(settings, redis_url=replicated.url, redis_cluster=True)
    bus = Bus(s, dispatcher=RecordingDispatcher())
    bus.open_session("coord")
    bus.turn("coord", "start")
    result: dict[str, Any] = {}

    def waited() -> None:
        sender = Bus(s, dispatcher=RecordingDispatcher())
        try:
            result.update(
                sender.send(
                    {"from": "hosta:peer", "to_id": "coord", "text": "q?", "id": "wq-f"},
                    wait=True,
                    timeout=90,
                )
            )
        except Exception as exc:  # what the sender would see
            result["raised"] = repr(exc)

    t = threading.Thread(target=waited, daemon=True)
    t.start()
    waiters = bus.store.k.s("coord", "waiters")
    wait_for(lambda: bus.store.r.sismember(waiters, "wq-f"), 30, "the sender waiting")
    wait_for(lambda: (bus.deliver_session("coord"), bus.drain("coord"))[1], 30, "the notice")
    node = replicated.master_of(bus.store.inbox.answer_key("coord", "wq-f"))
    replicated.client(node).execute_command("WAIT", 1, 5000)  # the replica has it all
    replicated.wait_promoted(replicated.kill_master(node), timeout=120)
    _retrying(lambda: bus.turn("coord", "end", answer="42"))
    t.join(120)
    assert result.get("state") == "answered" and result.get("answer") == "42", result
