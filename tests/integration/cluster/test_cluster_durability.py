"""Durability levels on a cluster store: each receiver's node confirms its own writes
(a marker in the receiver's slot, then the wait on one connection)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bus.api import Bus
from bus.core.errors import NotDurable
from bus.core.settings import Settings
from bus.delivery.dispatch import RecordingDispatcher
from bus.store.cluster import cluster_client


@pytest.fixture
def aof_cluster(cluster_settings: Settings) -> Iterator[Settings]:
    """The suite's cluster with its append-only files on for this test."""
    client = cluster_client(str(cluster_settings.redis_url))
    nodes = client.get_primaries()
    for node in nodes:
        client.get_redis_connection(node).config_set("appendonly", "yes")
    try:
        yield cluster_settings
    finally:
        for node in nodes:
            client.get_redis_connection(node).config_set("appendonly", "no")
        client.close()


def waitaofs(s: Settings) -> int:
    client = cluster_client(str(s.redis_url))
    try:
        return sum(
            int(
                client.get_redis_connection(n)
                .info("commandstats")
                .get("cmdstat_waitaof", {})
                .get("calls", 0)
            )
            for n in client.get_primaries()
        )
    finally:
        client.close()


def test_disk_on_a_cluster_is_confirmed_by_each_receivers_node(aof_cluster: Settings) -> None:
    b = Bus(aof_cluster, dispatcher=RecordingDispatcher())
    sids = [f"c{i}" for i in range(6)]  # spread over the nodes
    for sid in sids:
        b.open_session(sid)
    before = waitaofs(aof_cluster)
    one = b.send({"from": "h:a", "to_id": "c0", "text": "x"}, durability="disk")
    assert one["durable"] == "disk"
    assert waitaofs(aof_cluster) == before + 1
    many = b.send_many(
        [{"from": "h:a", "to_id": sid, "text": "y"} for sid in sids], durability="disk"
    )
    assert {a["durable"] for a in many} == {"disk"}
    with pytest.raises(NotDurable, match="no replica acknowledged"):  # the suite's has none
        b.send({"from": "h:a", "to_id": "c1", "text": "z"}, durability="replica")
