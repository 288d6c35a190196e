"""Shared counters in Redis and their Prometheus exposition (real Redis)."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import redis
from prometheus_client import CollectorRegistry, generate_latest

from bus.api import Bus
from bus.telemetry.metrics import Metrics, RedisCollector, counter_field, parse_field


def exposition(b: Bus) -> str:
    registry = CollectorRegistry()
    registry.register(RedisCollector(lambda: b.store))
    return generate_latest(registry).decode()


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample line in exposition text."""
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pattern = re.escape(name + (f"{{{inner}}}" if labels else "")) + r" (\S+)"
    m = re.search(r"^" + pattern + r"$", text, re.M)
    assert m, f"no sample {name} {labels} in:\n{text}"
    return float(m.group(1))


def test_counts_add_up_across_processes(bus: Bus, make_bus: Callable[..., Bus]) -> None:
    other = make_bus(host="hostb")
    a = Metrics(bus.store)
    b = Metrics(other.store)
    a.incr("messages_in")
    b.incr("messages_in", 2)
    a.incr("deliveries", via="socket")
    b.incr("deliveries", via="file")
    b.incr("deliveries", via="file")
    counters = a.snapshot()["counters"]
    assert counters["messages_in"] == 3
    assert counters['deliveries{via="file"}'] == 2
    text = exposition(bus)
    assert sample(text, "inbox_messages_in_total") == 3
    assert sample(text, "inbox_deliveries_total", via="socket") == 1
    assert sample(text, "inbox_deliveries_total", via="file") == 2


def test_label_fields_are_sorted_and_round_trip() -> None:
    field = counter_field("x", {"b": "2", "a": 'q"u\\o'})
    assert field == 'x{a="q\\"u\\\\o",b="2"}'
    assert parse_field(field) == ("x", {"a": 'q"u\\o', "b": "2"})
    with pytest.raises(ValueError):
        counter_field("bad name", {})


def test_latency_histogram_is_cumulative(bus: Bus) -> None:
    m = Metrics(bus.store)
    for s in (0.001, 0.02, 0.02, 0.7, 100.0):
        m.observe_latency(s)
    text = exposition(bus)
    name = "inbox_delivery_latency_seconds_bucket"
    assert sample(text, name, le="0.005") == 1
    assert sample(text, name, le="0.01") == 1
    assert sample(text, name, le="0.025") == 3
    assert sample(text, name, le="0.5") == 3
    assert sample(text, name, le="1.0") == 4
    assert sample(text, name, le="60.0") == 4
    assert sample(text, name, le="+Inf") == 5
    assert sample(text, "inbox_delivery_latency_seconds_count") == 5
    assert sample(text, "inbox_delivery_latency_seconds_sum") == pytest.approx(100.741)
    snap = m.snapshot()["latency"]
    assert snap["count"] == 5 and snap["buckets"]["+Inf"] == 5


def test_queue_depth_and_sessions(bus: Bus, make_bus: Callable[..., Bus]) -> None:
    bus.open_session("s1")
    make_bus(host="hostb").open_session("s2", host="hostb")
    for i in range(3):
        answer = bus.send({"from": "hosta:me", "to_id": "s1", "text": f"x{i}"})
        assert answer["state"] == "stored"
    text = exposition(bus)
    assert sample(text, "inbox_queue_depth", host="hosta") == 3
    assert sample(text, "inbox_queue_depth", host="hostb") == 0
    assert sample(text, "inbox_sessions", state="idle") == 2
    assert sample(text, "inbox_sessions", state="closed") == 0
    assert sample(text, "inbox_redis_up") == 1


def test_scrape_with_redis_down_says_so(make_bus: Callable[..., Bus]) -> None:
    dead = make_bus(redis_url="redis://127.0.0.1:1/0")
    text = exposition(dead)
    assert sample(text, "inbox_redis_up") == 0
    with pytest.raises(redis.RedisError):
        Metrics(dead.store).incr("messages_in")


def test_batched_writes_reach_redis_together_at_the_end(bus: Bus) -> None:
    m = bus.metrics
    with m.batched():
        m.incr("notices")
        with m.batched():  # nested: the outer block sends
            m.incr("deliveries", via="file")
            m.observe_latency(0.3)
        assert m.snapshot()["counters"] == {}  # held until the block ends
        assert m.snapshot()["latency"]["count"] == 0
    snap = m.snapshot()
    assert snap["counters"] == {"notices": 1, 'deliveries{via="file"}': 1}
    assert snap["latency"]["count"] == 1 and snap["latency"]["sum"] == pytest.approx(0.3)
    assert snap["latency"]["buckets"]["0.5"] == 1
    m.incr("notices")  # outside a block: written at once
    assert m.snapshot()["counters"]["notices"] == 2


def test_batched_writes_are_sent_when_the_block_raises(bus: Bus) -> None:
    with pytest.raises(RuntimeError), bus.metrics.batched():
        bus.metrics.incr("wakes")
        raise RuntimeError("the delivery failed")
    assert bus.metrics.snapshot()["counters"] == {"wakes": 1}
