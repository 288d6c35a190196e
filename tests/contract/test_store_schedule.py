"""The store's schedule aggregate: due times, the sweeps' claims, heartbeats, host claims
(bus/store/schedule.py, bus/store/beats.py, bus/store/host_claim.py),
held to its contract on every backend (a standalone Redis and a Redis Cluster:
tests/support/store_backends.py)."""

# ruff: noqa: F811  (the store fixture, imported from tests.support.store_backends)
from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from bus.store.many import SweepView
from bus.store.store import Store
from tests.support.store_backends import SIDS, info, store  # noqa: F401  (the fixture)


def test_the_schedule_keeps_the_earlier_time_and_hands_each_entry_out_once(
    store: Store,
) -> None:
    store.schedule.schedule("due", "s6", 2000)
    store.schedule.schedule("due", "s6", 1000)  # earlier wins
    store.schedule.schedule("due", "s6", 3000)  # later is ignored
    store.schedule.schedule("retry", "s7", 5000, earliest=False)
    store.schedule.schedule("retry", "s7", 6000, earliest=False)  # replaced
    store.schedule.schedule("due", "s8", 1500)
    store.schedule.unschedule("due", "s8")
    assert store.schedule.next_due() == 1000
    assert store.schedule.take_due(999) == []
    assert store.schedule.take_due(5999) == [("due", "s6")]
    assert store.schedule.take_due(5999) == []
    assert store.schedule.take_due(6000) == [("retry", "s7")]
    assert store.schedule.next_due() is None


def test_take_due_from_many_threads_hands_out_each_entry_exactly_once(store: Store) -> None:
    for i in range(200):
        store.schedule.schedule("due", SIDS[i % len(SIDS)] + f"x{i}", 10)
    got: list[tuple[str, str]] = []
    lock = threading.Lock()

    def taker() -> None:
        while True:
            batch = store.schedule.take_due(100, limit=7)
            if not batch:
                return
            with lock:
                got.extend(batch)

    threads = [threading.Thread(target=taker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(got) == 200 and len(set(got)) == 200


def test_one_sweep_claim_per_interval(store: Store) -> None:
    assert store.schedule.claim_sweep(60_000) is True
    assert store.schedule.claim_sweep(60_000) is False


def test_a_claim_held_elsewhere_is_not_asked_for_before_it_can_be_free(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = Store(store.r, store.k)  # another scheduler process, on the same prefix
    assert other.schedule.claim_sweep(2_000, what="expiry")
    calls: list[object] = []
    real = store.pipeline

    def pipeline(*a: Any, **k: Any) -> Any:
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(store, "pipeline", pipeline)
    now = time.monotonic()
    monkeypatch.setattr(store.schedule, "claim_clock", lambda: now)
    assert store.schedule.claim_sweep(2_000, what="expiry") is False
    assert len(calls) == 1  # asked once: held, with its time left
    for _ in range(5):  # a scheduler's ticks meanwhile
        assert store.schedule.claim_sweep(2_000, what="expiry") is False
    assert len(calls) == 1
    assert store.schedule.claim_sweep(2_000) is True  # another claim is its own
    store.r.delete(store.k.expiry_sweep)  # the key expired...
    assert store.schedule.claim_sweep(2_000, what="expiry") is False  # ...unseen before its time
    monkeypatch.setattr(store.schedule, "claim_clock", lambda: now + 2.1)
    assert store.schedule.claim_sweep(2_000, what="expiry") is True


def test_heartbeats_and_the_sweep_view(store: Store) -> None:
    store.schedule.beat("hosta", {"beat": 5, "pid": 42})
    store.schedule.beat("hosta", {"progress": 6}, done=True)
    store.schedule.beat("scheduler", {"beat": 7})
    got = store.schedule.beats(lambda name: None if name == "scheduler" else f"inbox.{name}")
    assert got == [
        ("hosta", {"beat": "5", "pid": "42", "progress": "6", "done": "1"}, 0),
        ("scheduler", {"beat": "7"}, 0),
    ]
    assert store.schedule.sweep_views(["nobody"]) == []
    store.sessions.put_session(info("s1"))
    store.schedule.schedule("due", "s1", 1000)
    [(got, view)] = store.schedule.sweep_views(["s1"])
    assert got.session == "s1"
    assert view == SweepView(False, None, False, 1000, None, [])


def test_many_entries_go_on_the_schedule_at_once_the_earlier_time_kept(store: Store) -> None:
    store.schedule.schedule("due", SIDS[0], 5000)
    store.schedule.schedule_many("due", [(SIDS[0], 7000), (SIDS[1], 3000), (SIDS[2], 4000)])
    store.schedule.schedule_many("due", [])
    assert store.schedule.take_due(10_000, limit=10) == [
        ("due", SIDS[1]),
        ("due", SIDS[2]),
        ("due", SIDS[0]),
    ]


def test_a_host_is_claimed_by_one_floor_until_its_holder_releases_it(store: Store) -> None:
    assert store.schedule.host_floors([]) == []
    assert store.schedule.host_floors(["h1"]) == [({}, {})]
    assert store.schedule.claim_host("h1", "floorA", 11, 60_000) is None
    assert store.schedule.claim_host("h1", "floorA", 11, 60_000) is None  # renewed
    held = store.schedule.claim_host("h1", "floorB", 22, 60_000)
    assert held is not None and (held["floor"], held["pid"]) == ("floorA", "11")
    assert not store.schedule.release_host("h1", "floorB", 22)  # not its claim to give up
    assert store.schedule.release_host("h1", "floorA", 11)
    assert store.schedule.claim_host("h1", "floorB", 22, 60_000) is None


def test_a_refusal_is_kept_beside_the_claim_and_replaces_the_last_one(store: Store) -> None:
    store.schedule.claim_host("h1", "floorA", 11, 60_000)
    store.schedule.record_refusal("h1", {"floor": "floorB", "pid": 22, "reason": "held"})
    store.schedule.record_refusal("h1", {"floor": "floorC", "pid": 33})
    [(claim, refused)] = store.schedule.host_floors(["h1"])
    assert claim["floor"] == "floorA" and refused == {"floor": "floorC", "pid": "33"}
    assert 0 < store.r.ttl(store.k.host_refused("h1")) <= 3600


def test_a_host_marked_starting_is_listed_and_read_with_its_beat(store: Store) -> None:
    assert store.schedule.beats_at(["h1"]) == [(None, None)]
    store.schedule.mark_starting("h1")
    [(beat, starting)] = store.schedule.beats_at(["h1"])
    assert beat is None and starting is not None and starting > 0
    assert [name for name, _fields, _depth in store.schedule.beats(lambda _n: None)] == ["h1"]
    assert store.schedule.drop_beat("h1") is True
    assert store.schedule.drop_beat("h1") is False  # gone already
    assert store.schedule.beats(lambda _n: None) == []
