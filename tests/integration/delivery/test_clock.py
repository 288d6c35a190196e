"""The injectable clock: the scheduler and the floor read time from it, tests move it."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from bus.api import Bus
from bus.core.clock import ManualClock, SystemClock
from bus.delivery.dispatch import RecordingDispatcher
from bus.delivery.floor import Floor
from bus.delivery.scheduler import tick


def test_a_manual_clock_stands_still_until_moved() -> None:
    clock = ManualClock(1000)
    assert clock.now_ms() == clock.now_ms() == 1000
    assert clock.advance(250) == 1250 and clock.now_ms() == 1250
    clock.set(5)
    assert clock.now_ms() == 5
    assert SystemClock().now_ms() > 1_600_000_000_000


def test_the_scheduler_takes_an_entry_when_the_clock_reaches_it(
    make_bus: Callable[..., Bus],
) -> None:
    recorder = RecordingDispatcher()
    b = make_bus(dispatcher=recorder)
    b.open_session("later")
    clock = ManualClock()
    b.store.schedule.schedule("due", "later", clock.now_ms() + 60_000)
    assert tick(b.delivery, sweep=False, clock=clock)["taken"] == 0
    clock.advance(59_999)
    assert tick(b.delivery, sweep=False, clock=clock)["taken"] == 0
    clock.advance(1)
    assert tick(b.delivery, sweep=False, clock=clock) == {
        "taken": 1,
        "dispatched": 1,
        "swept": 0,
        "expired": 0,
        "compacted": 0,  # the compaction pass ran at the first tick: once a minute
    }
    assert recorder.calls == [("hosta", "later")]


def interval_passed(one: Bus, two: Bus, monkeypatch: pytest.MonkeyPatch, claim_key: str) -> None:
    """A minute on: the claim's key expired, and the processes' clocks moved on."""
    one.store.r.delete(claim_key)
    later = time.monotonic() + 61
    for b in (one, two):
        monkeypatch.setattr(b.store.schedule, "claim_clock", lambda: later)


def test_one_tick_of_many_sweeps_per_interval(
    make_bus: Callable[..., Bus], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two buses stand for two scheduler processes (or two prefork children).
    recorder = RecordingDispatcher()
    one, two = make_bus(dispatcher=recorder), make_bus(dispatcher=recorder)
    one.open_session("stuck")
    one.store.queue.append("stuck", "m1", "{}", "{}")
    one.store.queue.clear_pending("stuck")  # the dispatch was lost
    assert one.store.schedule.claim_sweep(60_000)  # another process swept just now
    assert tick(two.delivery)["swept"] == 0 and tick(one.delivery)["swept"] == 0
    interval_passed(one, two, monkeypatch, one.store.k.sweep)
    assert tick(two.delivery)["swept"] == 1
    assert recorder.calls == [("hosta", "stuck")]


def test_the_floor_stamps_a_malformed_line_with_its_clock(tmp_path: Path) -> None:
    floor = Floor(tmp_path, clock=ManualClock(4242))
    d = floor.session_dir("s1", create=True)
    (d / "messages.jsonl").write_text("not json\n")
    assert floor.drain("s1").malformed == ["not json"]
    import json

    (line,) = (d / "malformed.jsonl").read_text().splitlines()
    assert json.loads(line)["at"] == 4242


def test_one_expiry_pass_of_many_per_interval(
    make_bus: Callable[..., Bus], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two buses stand for two scheduler processes: the interval is claimed in Redis.
    one, two = make_bus(), make_bus()
    one.open_session("gone")
    one.turn("gone", "start")
    one.turn("gone", "end")  # idle after a turn: an fyi waits for a notice
    sent = one.send({"from": "hosta:me", "to_id": "gone", "text": "nobody reads", "class": "fyi"})
    one.deliver_session("gone")
    one.store.r.zadd(one.store.k.s("gone", "new"), {sent["id"]: 1})  # arrived long ago
    assert one.store.schedule.claim_sweep(60_000, what="expiry")  # another process's pass, just now
    assert two.receipts.expire_all() == 0
    interval_passed(one, two, monkeypatch, one.store.k.expiry_sweep)
    assert two.receipts.expire_all() == 1


def test_an_expiry_pass_hands_back_between_its_chunks(
    make_bus: Callable[..., Bus], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The scheduler takes due entries between the chunks of a large registry's pass.
    from bus.delivery import receipts

    b = make_bus()
    for sid in ("e1", "e2", "e3"):
        b.open_session(sid)
    monkeypatch.setattr(receipts, "EXPIRE_CHUNK", 2)
    calls: list[int] = []
    b.receipts.expire_all(force=True, between=lambda: calls.append(1))
    assert len(calls) == 2  # after each of the two chunks of three sessions
