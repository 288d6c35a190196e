"""Delivery end to end: real Redis, real Celery workers (subprocesses), real files/sockets."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bus.api import Bus
from bus.core.settings import Settings
from tests.support.listeners import SilentListener
from tests.support.waiting import wait_for
from tests.support.worker_proc import WorkerProcess
from workers.app import make_app
from workers.dispatch import CeleryDispatcher

pytestmark = pytest.mark.slow


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """These tests follow raw lines (the rollback switch); the inbox has its own tests."""
    return replace(settings, agent_inbox=False)


def floor_ids(home: Path, sid: str) -> list[str]:
    path = home / "inbox" / sid / "messages.jsonl"
    if not path.exists():
        return []
    return [json.loads(line)["id"] for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture
def two_hosts(settings: Settings, tmp_path: Path) -> tuple[Settings, Settings]:
    a = replace(settings, host="hosta", home=tmp_path / "home-a")
    b = replace(settings, host="hostb", home=tmp_path / "home-b")
    return a, b


def celery_bus(s: Settings) -> Bus:
    return Bus(s, dispatcher=CeleryDispatcher(make_app(s)))


def test_message_from_host_a_reaches_host_b_through_b_worker_only(
    two_hosts: tuple[Settings, Settings], start_worker: Callable[..., WorkerProcess]
) -> None:
    a, b = two_hosts
    start_worker(a)
    start_worker(b)
    bus_a = celery_bus(a)
    bus_a.open_session("on-b", host="hostb")
    bus_a.open_session("on-a", host="hosta")
    sent_b = bus_a.send({"from": "hosta:me", "to_id": "on-b", "text": "for b"})
    sent_a = bus_a.send({"from": "hosta:me", "to_id": "on-a", "text": "for a"})
    assert sent_b["recipient"]["host"] == "hostb"
    wait_for(lambda: floor_ids(b.home, "on-b") == [sent_b["id"]], what="b's floor")
    wait_for(lambda: floor_ids(a.home, "on-a") == [sent_a["id"]], what="a's floor")
    assert not (a.home / "inbox" / "on-b").exists()
    assert not (b.home / "inbox" / "on-a").exists()


def test_same_id_sent_twice_across_a_worker_restart_is_written_once(
    settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    w = start_worker(settings)
    b = celery_bus(settings)
    b.open_session("s1")
    first = b.send({"from": "hosta:me", "to_id": "s1", "text": "once", "id": "m-1"})
    wait_for(lambda: floor_ids(settings.home, "s1") == ["m-1"], what="first delivery")
    w.stop()
    start_worker(settings)
    again = b.send({"from": "hosta:me", "to_id": "s1", "text": "once", "id": "m-1"})
    assert again["duplicate"] is True and again["thread"] == first["thread"]
    marker = b.send({"from": "hosta:me", "to_id": "s1", "text": "after", "id": "m-2"})
    wait_for(lambda: floor_ids(settings.home, "s1")[-1:] == [marker["id"]], what="marker")
    assert floor_ids(settings.home, "s1") == ["m-1", "m-2"]


def test_worker_killed_mid_delivery_loses_nothing_and_writes_once(
    settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    s = replace(settings, lock_ttl_s=1.0, visibility_timeout_s=2.0)
    b = celery_bus(s)
    b.open_session("victim")
    listener = SilentListener(s.home / "inbox" / "victim" / "inbox.sock")
    w = start_worker(s, pool="solo")
    ids = [b.send({"from": "hosta:me", "to_id": "victim", "text": f"m{i}"})["id"] for i in range(5)]
    # The worker has written the first line to the socket and waits for an ack: kill it.
    assert listener.got_line.wait(20), "the worker never reached the socket"
    w.kill()
    listener.close()
    assert floor_ids(s.home, "victim") == []
    start_worker(s, pool="solo")
    # The killed task was never acknowledged; the new worker redoes it (broker redelivery
    # after the visibility timeout, or the scheduler's sweep).
    from bus.delivery.scheduler import sweep_backlogs

    def delivered() -> bool:
        sweep_backlogs(b.delivery)
        return len(floor_ids(s.home, "victim")) >= 5

    wait_for(delivered, timeout=30, what="redelivery", interval=0.5)
    assert sorted(floor_ids(s.home, "victim")) == sorted(ids)


def test_a_line_written_before_a_crash_is_not_written_again(bus: Bus) -> None:
    bus.open_session("crashy")
    sent = bus.send({"from": "hosta:me", "to_id": "crashy", "text": "hi"})
    # What a worker killed between writing the line and moving the cursor leaves behind.
    eid, fields = bus.store.queue.read_after("crashy", "0-0")[0]
    bus.store.queue.set_rawflight("crashy", eid, sent["id"])
    bus.floor.append("crashy", json.loads(fields["m"]))
    report = bus.deliver_session("crashy")
    assert report.skipped == 1 and report.raw == 0
    assert floor_ids(bus.settings.home, "crashy") == [sent["id"]]


def test_a_line_not_written_before_a_crash_is_written(bus: Bus) -> None:
    bus.open_session("crashy")
    sent = bus.send({"from": "hosta:me", "to_id": "crashy", "text": "hi"})
    eid, _ = bus.store.queue.read_after("crashy", "0-0")[0]
    bus.store.queue.set_rawflight("crashy", eid, sent["id"])
    report = bus.deliver_session("crashy")
    assert report.raw == 1
    assert floor_ids(bus.settings.home, "crashy") == [sent["id"]]


def test_a_burst_dispatches_a_bounded_number_of_deliveries(bus: Bus) -> None:
    bus.open_session("burst")
    for i in range(100):
        bus.send({"from": "hosta:me", "to_id": "burst", "text": f"m{i}"})
    assert len(bus.dispatcher.calls) == 1  # type: ignore[attr-defined]
    bus.deliver_session("burst")
    bus.send({"from": "hosta:me", "to_id": "burst", "text": "later"})
    assert len(bus.dispatcher.calls) == 2  # type: ignore[attr-defined]


def test_unknown_recipient_bounces_and_stores_nothing(bus: Bus) -> None:
    answer = bus.send({"from": "hosta:me", "to_id": "nobody", "text": "hi"})
    assert answer["state"] == "bounced" and answer["ok"] is False
    assert "nobody" in answer["reason"]
    assert bus.store.queue.read_after("nobody", "0-0") == []


def test_celery_call_send_end_to_end(
    settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    start_worker(settings)
    b = celery_bus(settings)
    b.open_session("callee")
    kwargs = json.dumps(
        {"from": "hosta:cli", "to_id": "callee", "text": "via celery call", "id": "celery-call-1"}
    )
    out = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "workers", "call", "send", "--kwargs", kwargs],
        env=settings.child_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout.strip()  # celery prints the task id
    wait_for(lambda: floor_ids(settings.home, "callee") == ["celery-call-1"], what="delivery")


def test_a_delivery_that_lost_its_lock_stops_before_the_next_write(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    bus.open_session("slow")
    ids = [bus.send({"from": "hosta:me", "to_id": "slow", "text": f"m{i}"})["id"] for i in range(3)]
    real = bus.floor.write_line

    def slow_write(sid: str, obj: dict[str, Any], **kw: Any) -> Any:
        # The write outlived the lock's TTL and another delivery took the session.
        bus.store.r.set(bus.store.k.s(sid, "lock"), "someone-else")
        return real(sid, obj, **kw)

    monkeypatch.setattr(bus.floor, "write_line", slow_write)
    report = bus.deliver_session("slow")
    assert report.busy and report.raw == 1
    assert floor_ids(bus.settings.home, "slow") == ids[:1]
    assert (
        bus.store.queue.read_after("slow", bus.store.queue.cursor("slow")) != []
    )  # the rest waits


def test_the_sweep_redoes_a_wake_whose_dispatch_was_lost(make_bus: Callable[..., Bus]) -> None:
    from bus.delivery.scheduler import sweep_backlogs

    b = make_bus(agent_inbox=True)
    b.open_session("lost")
    b.send({"from": "hosta:me", "to_id": "lost", "text": "first work"})
    b.deliver_session("lost")
    b.store.schedule.take_due(2**62)  # a scheduler took the wake, then its dispatch failed
    calls = b.dispatcher.calls  # type: ignore[attr-defined]
    calls.clear()
    b.store.queue.clear_pending("lost")
    assert sweep_backlogs(b.delivery) == 1 and calls == [("hosta", "lost")]
    b.deliver_session("lost")
    assert b.store.schedule.next_due() is not None  # planned again


def test_delivered_entries_are_trimmed_and_undelivered_ones_never(
    make_bus: Callable[..., Bus],
) -> None:
    b = make_bus(stream_keep=5)
    b.open_session("t")
    for i in range(30):
        b.send({"from": "hosta:me", "to_id": "t", "text": f"m{i}"})
    b.deliver_session("t")
    assert b.store.queue.backlog("t") == 0
    undelivered = [
        b.send({"from": "hosta:me", "to_id": "t", "text": f"n{i}"})["id"] for i in range(12)
    ]
    assert b.store.queue.backlog("t") == 12
    length = b.store.r.xlen(b.store.k.s("t", "stream"))
    assert length < 30 + 12, length  # delivered entries went
    pending = [f["id"] for _e, f in b.store.queue.read_after("t", b.store.queue.cursor("t"))]
    assert pending == undelivered  # undelivered ones never
