"""Counters held in a worker's memory and written every flush period
(bus.telemetry.counter_flush): nothing lost, one write for many deliveries, none on a
delivery's own path; real Redis, a real worker."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
import redis

from bus.api import Bus
from bus.core.settings import Settings
from bus.telemetry.counter_flush import HeldCounters
from bus.telemetry.metrics import Metrics
from tests.support.trips import RoundTrips, standalone
from tests.support.waiting import wait_for
from tests.support.worker_proc import WorkerProcess
from workers.app import make_app
from workers.dispatch import CeleryDispatcher


def test_held_counts_are_summed_and_written_in_one_call_per_flush(bus: Bus) -> None:
    calls: list[list[tuple[str, str, float]]] = []

    def write(writes: list[tuple[str, str, float]]) -> None:
        calls.append(writes)
        bus.store.server.counter_add_many(writes)

    m = Metrics(bus.store)
    m.held = HeldCounters(write, period_s=3600)  # flushed only when the test says
    for _ in range(50):  # fifty lone deliveries' counters
        with m.batched():
            m.incr("deliveries", via="file")
            m.observe_latency(0.02)
    m.incr("wakes")
    assert m.snapshot()["counters"] == {}  # held, not written
    assert m.held.flush()
    assert len(calls) == 1 and len(calls[0]) == 5  # one write, a field once each
    snap = m.snapshot()
    assert snap["counters"] == {'deliveries{via="file"}': 50, "wakes": 1}
    assert snap["latency"]["count"] == 50 and snap["latency"]["sum"] == pytest.approx(1.0)
    assert m.held.flush() and len(calls) == 1  # nothing held: nothing sent


def test_counts_redis_did_not_take_are_written_with_the_next_flush(bus: Bus) -> None:
    down = [True]

    def write(writes: list[tuple[str, str, float]]) -> None:
        if down[0]:
            raise ConnectionError("Redis did not answer")
        bus.store.server.counter_add_many(writes)

    held = HeldCounters(write, period_s=3600)
    m = Metrics(bus.store)
    m.held = held
    m.incr("notices", 3)
    assert not held.flush()
    m.incr("notices", 2)
    assert held.pending() == [("metrics", "notices", 5)]
    down[0] = False
    assert held.flush()
    assert m.snapshot()["counters"] == {"notices": 5}


def test_the_flush_thread_writes_them_without_being_asked(bus: Bus) -> None:
    m = Metrics(bus.store, flush_s=0.05)
    m.incr("flushes")
    assert wait_for(lambda: m.snapshot()["counters"].get("flushes") == 1, timeout=10)
    assert m.held is not None and m.held.pending() == []


@pytest.fixture
def trip_log(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Each round trip this process sends to Redis, as the names of its commands."""
    log: list[list[str]] = []
    real = redis.connection.AbstractConnection.send_packed_command

    def logging(self: Any, command: Any, check_health: bool = True) -> None:
        counted = RoundTrips()
        counted.sent(command)
        log.append(counted.commands)
        real(self, command, check_health)

    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", logging)
    return log


COUNTER_WRITES = {"HINCRBY", "HINCRBYFLOAT"}


def test_a_held_counter_costs_a_lone_delivery_no_round_trip(
    make_bus: Callable[..., Bus], trip_log: list[list[str]]
) -> None:
    # What is compared is the trips that write counters, not the total: the total also
    # holds what the server's state costs, e.g. a script reloaded after another test's
    # SCRIPT FLUSH on the shared server (two trips more), which the counters do not change.
    counter_trips: dict[str, list[list[str]]] = {}
    for flush_s in (0.0, 3600.0):
        b = standalone(make_bus(metrics_flush_s=flush_s))
        sid = f"s{int(flush_s)}"
        b.open_session(sid)
        b.turn(sid, "start")
        base = b.metrics.snapshot()["counters"].get("notices", 0)  # the same prefix's
        b.send({"from": "hosta:me", "to_id": sid, "text": "warm"})
        b.deliver_session(sid)  # connections open, scripts loaded
        b.send({"from": "hosta:me", "to_id": sid, "text": "hi"})
        trip_log.clear()
        assert b.deliver_session(sid).inbox == 1
        counter_trips[sid] = [t for t in trip_log if COUNTER_WRITES & set(t)]
        notices = b.metrics.snapshot()["counters"].get("notices", 0) - base
        assert notices == (0 if flush_s else 2)
        if b.metrics.held is not None:
            b.metrics.held.flush()
            assert b.metrics.snapshot()["counters"]["notices"] - base == 2
    # Written at once: the delivery's counters in one trip of their own (one transaction).
    assert len(counter_trips["s0"]) == 1
    assert set(counter_trips["s0"][0]) <= COUNTER_WRITES | {"MULTI", "EXEC"}
    # Held: that trip is gone and no other carries a counter.
    assert counter_trips["s3600"] == []


@pytest.mark.parametrize(
    ("raw", "want"),
    [(None, None), ("", None), ("0", 0.0), ("0.25", 0.25), ("-1", ValueError), ("x", ValueError)],
)
def test_the_flush_period_setting(raw: str | None, want: Any) -> None:
    env = {} if raw is None else {"INBOX_METRICS_FLUSH_S": raw}
    if want is ValueError:
        with pytest.raises(ValueError, match="INBOX_METRICS_FLUSH_S"):
            Settings.from_env(env)
        return
    s = Settings.from_env(env)
    assert s.metrics_flush_s == want
    assert Settings.from_env(s.to_env()).metrics_flush_s == want


def test_a_worker_writes_its_held_counters_when_it_stops(
    settings: Settings,
    make_bus: Callable[..., Bus],
    start_worker: Callable[..., WorkerProcess],
) -> None:
    # A flush period longer than the test: only the shutdown's flush can write them.
    s = replace(settings, metrics_flush_s=3600.0)
    b = make_bus(metrics_flush_s=3600.0, dispatcher=CeleryDispatcher(make_app(s)))
    b.open_session("me")
    b.open_session("w1")
    b.turn("w1", "start")
    worker = start_worker(s)
    sent = b.send({"from": "hosta:me", "from_session": "me", "to_id": "w1", "text": "hi"})
    floor = s.home / "inbox" / "w1" / "messages.jsonl"
    assert wait_for(lambda: floor.exists() and sent["id"] in floor.read_text(), timeout=30)
    # The delivery over: its lock freed in the notice's record, which the worker counts
    # the notice after (the line on the floor comes before both: a stop then raced them).
    wait_for(lambda: _free(b, "w1"), 30, "the delivery's end")
    assert b.metrics.snapshot()["counters"].get("notices", 0) == 0  # held in the worker
    worker.stop()  # SIGTERM to its group: the pool process too, as systemd stops it
    assert b.metrics.snapshot()["counters"].get("notices", 0) >= 1


def _free(b: Bus, sid: str) -> bool:
    """Whether nobody holds ``sid``'s delivery lock (taken and given back at once)."""
    token = b.store.delivery.lock(sid)
    if token is None:
        return False
    b.store.delivery.unlock(sid, token)
    return True


def test_a_forked_child_writes_its_own_counts_and_not_its_parents(bus: Bus) -> None:
    # A prefork pool process is forked from the worker: the parent's flush thread is not
    # in it, and the parent's held counts are the parent's to write.
    m = Metrics(bus.store, flush_s=0.05)
    m.incr("wakes")  # held in the parent, its flush thread started
    pid = os.fork()
    if pid == 0:  # the child: its own count must reach Redis by its own thread
        code = 1
        try:
            m.incr("flushes")
            wait_for(lambda: m.snapshot()["counters"].get("flushes") == 1, 10, "the child's")
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the child's count was never written"
    wait_for(lambda: m.snapshot()["counters"].get("wakes") == 1, 10, "the parent's")
    assert m.snapshot()["counters"] == {"wakes": 1, "flushes": 1}
