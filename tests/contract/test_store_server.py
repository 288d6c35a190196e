"""The store's server aggregate: the server's settings and memory report, the counters,
whether the server refuses writes and which durability it can meet
(bus/store/server_config.py, bus/store/metrics.py, bus/store/write_fault.py,
bus/store/durable.py), held to its contract on every backend
(tests/support/store_backends.py; fakeredis answers neither INFO nor CONFIG: those tests
run on the real servers)."""

# ruff: noqa: F811  (the store fixture, imported from tests.support.store_backends)
from __future__ import annotations

import pytest
import redis

from bus.store.store import Store
from tests.support.store_backends import store  # noqa: F401  (the fixture)


def real_server(store: Store) -> None:
    if type(store.r).__module__.startswith("fakeredis"):
        pytest.skip("fakeredis answers neither INFO nor CONFIG")


def config_answered(store: Store) -> None:
    """Go on where the server answers CONFIG; where it refuses it (the embedded server on
    TCP refuses it to its clients), hold the store to its contract's refusal
    (``redis.ResponseError``) and skip the rest: the second server (.ci/second-server)
    and the cluster answer CONFIG."""
    real_server(store)
    try:
        store.r.config_get("maxmemory")
    except redis.exceptions.NoPermissionError:
        with pytest.raises(redis.ResponseError):
            store.server.server_config(("maxmemory",))
        pytest.skip("this server refuses CONFIG to its clients; its refusal checked")


def nodes(store: Store) -> int:
    return len(store.r.get_nodes()) if store.cluster else 1


def test_counters_add_in_one_batch_and_read_back(store: Store) -> None:
    assert store.server.counters_read() == ({}, {})
    store.server.counter_incr("messages_in", 2)
    store.server.counter_add_many([("metrics", "wakes", 1), ("latency", "sum", 0.5)])
    store.server.counter_add_many([("latency", "count", 1), ("latency", "sum", 0.25)], atomic=True)
    counters, latency = store.server.counters_read()
    assert counters == {"messages_in": "2", "wakes": "1"}
    assert float(latency["sum"]) == 0.75 and latency["count"] == "1"
    with pytest.raises(ValueError):
        store.server.counter_add_many([("sessions", "x", 1)])


def test_the_memory_report_is_kept_and_read_back(store: Store) -> None:
    assert store.server.memory_report() == {}
    store.server.keep_memory_report({"maxmemory": "ok", "policy": "refused"})
    store.server.keep_memory_report({"policy": "ok"})  # a field at a time: others kept
    assert store.server.memory_report() == {"maxmemory": "ok", "policy": "ok"}


def test_a_setting_is_read_on_every_node_by_the_first_name_the_server_knows(
    store: Store,
) -> None:
    config_answered(store)
    got = store.server.server_config(("no-such-setting", "maxmemory"))
    assert len(got) == nodes(store) and all(v is not None and v.isdigit() for v in got)
    assert store.server.server_config(("no-such-setting",)) == [None] * nodes(store)


def test_a_setting_is_set_on_the_node_named_by_its_index(store: Store) -> None:
    config_answered(store)
    names = ("no-such-setting", "latency-tracking-info-percentiles", "slowlog-log-slower-than")
    before = store.server.server_config(names)
    # The server is shared with other tests: each node's setting is set to what it is.
    for node, value in enumerate(before):
        assert value is not None
        store.server.set_server_config(node, names, value)
    assert store.server.server_config(names) == before


def test_a_healthy_server_refuses_no_writes_and_meets_memory_durability(store: Store) -> None:
    real_server(store)
    assert store.server.write_fault() is None
    assert store.server.durability_unmet("memory") is None
    if store.cluster:  # a cluster's nodes are asked at each send
        assert store.server.durability_unmet("disk") is None
