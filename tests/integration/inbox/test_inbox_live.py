"""The inbox through real Celery workers (subprocesses) and a real scheduler."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest

from bus.core.settings import Settings
from bus.surfaces.harness.listener import Listener
from tests.support.celery_bus import Scheduler, celery_bus, events, marks
from tests.support.listeners import SilentListener
from tests.support.waiting import wait_for
from tests.support.worker_proc import WorkerProcess

pytestmark = pytest.mark.slow


@pytest.fixture
def schedulers() -> Iterator[Callable[[Settings], Scheduler]]:
    made: list[Scheduler] = []

    def factory(s: Settings) -> Scheduler:
        sch = Scheduler(s)
        made.append(sch)
        return sch

    yield factory
    for sch in made:
        sch.stop()


def test_300_messages_through_a_worker_are_one_notice_and_no_turns(
    settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    start_worker(settings)
    b = celery_bus(settings)
    b.open_session("coord")
    b.turn("coord", "start")
    for n in range(300):
        b.send(
            {
                "from": f"ha:lane{n % 7}",
                "to_id": "coord",
                "text": f"msg {n}",
                "class": "blocker" if n == 3 else "action",
            }
        )
    k = b.store.k

    def all_on_the_floor() -> bool:
        # Every message taken from the stream and carried by a notice that was written.
        return b.store.queue.backlog("coord") == 0 and not any(
            b.store.r.exists(k.s("coord", name)) for name in ("new", "notice")
        )

    wait_for(all_on_the_floor, what="all 300 taken and written", timeout=30)
    text = b.drain("coord", stamped=True)
    assert isinstance(text, str) and text.count("[inbox") == 1
    assert text.splitlines()[0].startswith("[inbox · 300 new in 7 threads")
    assert text.splitlines()[1].startswith("  ! ")
    assert b.session("coord").turns == 1 and events(b, "coord", "wake") == []


def test_idle_session_wakes_once_through_scheduler_and_worker(
    settings: Settings,
    start_worker: Callable[..., WorkerProcess],
    schedulers: Callable[[Settings], Scheduler],
) -> None:
    start_worker(settings)
    schedulers(settings)
    b = celery_bus(settings)
    b.open_session("idle1")
    for i in range(10):
        b.send({"from": "ha:x", "to_id": "idle1", "text": f"b{i}", "class": "blocker"})
    wait_for(lambda: events(b, "idle1", "wake"), what="the wake", timeout=20)
    first_at = int(events(b, "idle1", "inbox")[0]["at"])
    wake_at = int(events(b, "idle1", "wake")[0]["at"])
    assert wake_at - first_at >= settings.wake_debounce_s * 1000
    assert len(b.floor.peek("idle1")) == 1
    assert b.session("idle1").state == "running"  # the wake started a turn
    b.send({"from": "ha:x", "to_id": "idle1", "text": "later", "class": "blocker"})
    wait_for(lambda: len(b.floor.peek("idle1")) == 2, what="a steer notice", timeout=20)
    assert len(events(b, "idle1", "wake")) == 1


def test_a_scheduler_restart_during_a_pending_wake_still_wakes_once(
    settings: Settings,
    start_worker: Callable[..., WorkerProcess],
    schedulers: Callable[[Settings], Scheduler],
) -> None:
    s = replace(settings, wake_debounce_s=1.5)
    start_worker(s)
    first = schedulers(s)
    b = celery_bus(s)
    b.open_session("sr")
    b.send({"from": "ha:x", "to_id": "sr", "text": "blocked", "class": "blocker"})
    wait_for(lambda: b.store.schedule.next_due() is not None, what="the wake on the schedule")
    first.stop()  # the scheduler goes away before the wake is due
    schedulers(s)  # a new one, and a second one running at the same time
    schedulers(s)
    wait_for(lambda: events(b, "sr", "wake"), what="the wake", timeout=20)
    b.send({"from": "ha:x", "to_id": "sr", "text": "blocked again", "class": "blocker"})
    wait_for(lambda: len(b.floor.peek("sr")) == 2, what="the steer", timeout=20)
    assert len(events(b, "sr", "wake")) == 1


def test_worker_killed_between_notice_built_and_ack_leaves_messages_new(
    settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    s = replace(settings, lock_ttl_s=1.0, visibility_timeout_s=2.0)
    b = celery_bus(s)
    b.open_session("k")
    b.turn("k", "start")
    silent = SilentListener(s.home / "inbox" / "k" / "inbox.sock")
    w = start_worker(s, pool="solo")
    ids = [b.send({"from": "ha:x", "to_id": "k", "text": f"m{i}"})["id"] for i in range(3)]
    assert silent.got_line.wait(20), "the worker never wrote the notice"
    w.kill()  # the notice is built and written; its ack never came
    silent.close()
    assert set(marks(b, "k").values()) <= {"new"}
    got: list[dict[str, Any]] = []
    with Listener.for_session(b.floor, "k", lambda o: got.append(o) or True):
        start_worker(s, pool="solo")
        from bus.delivery.scheduler import sweep_backlogs

        def all_noticed() -> bool:
            sweep_backlogs(b.delivery)  # what the scheduler does every few seconds
            return set(marks(b, "k").values()) == {"noticed"} and len(marks(b, "k")) == 3

        wait_for(all_noticed, timeout=30, interval=0.5, what="the next notice")
    carried = [m for n in got for m in n["notice"]["messages"]]
    assert sorted(carried) == sorted(ids)
    assert b.floor.peek("k") == []


def test_a_session_whose_floor_path_is_over_200_bytes_hears_a_mid_turn_message_on_inbox_listen(
    settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    # `inbox listen` binds through the short per-user link to the session's folder, and
    # the worker connects the same way: the notice is heard on the socket, not the file.
    s = replace(settings, home=settings.home / ("d" * 100) / ("e" * 60))
    sid = str(uuid.uuid4())
    b = celery_bus(s)
    sock = b.floor.socket_path(sid)
    assert len(str(sock).encode()) > 200
    b.open_session(sid)
    b.turn(sid, "start")
    env = s.child_env()
    proc = subprocess.Popen(
        [sys.executable, "-m", "bus.surfaces.cli.app", "listen", sid],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(sock.exists, timeout=20, what="the listener's socket")
        start_worker(s)
        sent = b.send({"from": "ha:x", "to_id": sid, "text": "mid-turn"})
        assert proc.stdout is not None
        heard = json.loads(proc.stdout.readline())
        assert heard["kind"] == "notice" and heard["notice"]["messages"] == [sent["id"]]
        wait_for(lambda: marks(b, sid).get(sent["id"]) == "noticed", 30, what="marked heard")
        assert b.floor.peek(sid) == []  # heard on the socket; nothing waits on the file
    finally:
        proc.terminate()
        proc.wait(10)
    assert not sock.exists()
