"""A cluster URL naming several nodes (bus.store.cluster.split_nodes): a client started
while the first one is down (a master killed, its host cut off) connects through another."""

from __future__ import annotations

import pytest

from bus.store.cluster import cluster_client, split_nodes
from tests.support.local_servers import free_port


@pytest.mark.parametrize(
    ("url", "first", "others"),
    [
        ("redis://h:7000", "redis://h:7000", []),
        ("redis://:pw@h:7000/0", "redis://:pw@h:7000/0", []),
        ("redis://:pw@a:1,b:2/0", "redis://:pw@a:1/0", [("b", 2)]),
        ("redis://a:1,b:2,c:3", "redis://a:1", [("b", 2), ("c", 3)]),
        ("redis://:p@ss@a:1,[::1]:2", "redis://:p@ss@a:1", [("::1", 2)]),
        ("unix:///tmp/r.sock", "unix:///tmp/r.sock", []),
    ],
)
def test_a_cluster_url_names_its_first_node_and_the_others(
    url: str, first: str, others: list[tuple[str, int]]
) -> None:
    assert split_nodes(url) == (first, others)


@pytest.mark.parametrize("bad", ["redis://a:1,b/0", "redis://a:1,:2", "redis://a:1,b:x"])
def test_a_node_that_is_not_host_and_port_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="is not host:port"):
        split_nodes(bad)


@pytest.mark.slow
def test_a_client_connects_when_the_first_node_named_is_down(redis_cluster_url: str) -> None:
    scheme, rest = redis_cluster_url.split("://", 1)
    auth, _, live = rest.rpartition("@")
    live_node = live.split("/", 1)[0]
    dead = f"127.0.0.1:{free_port()}"  # nothing listens there
    url = f"{scheme}://{auth + '@' if auth else ''}{dead},{live_node}/0"
    with pytest.raises(Exception):  # noqa: B017 - redis-py's own, whichever it raises
        cluster_client(f"{scheme}://{auth + '@' if auth else ''}{dead}/0").ping()
    client = cluster_client(url)
    try:
        assert client.ping()
        client.set("url-test:{k}", "v")
        assert client.get("url-test:{k}") == "v"
        client.delete("url-test:{k}")
    finally:
        client.close()


def test_the_fast_drains_own_client_leaves_a_several_node_url_to_redis_py() -> None:
    from bus.lanes import resp as resp_client

    assert resp_client.connect("redis://:pw@a:1,b:2/0") is resp_client.UNSUPPORTED
