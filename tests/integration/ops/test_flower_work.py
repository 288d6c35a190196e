"""Flower shows the bus's work: deliveries, wakes and flushes from the kick list, read
through a real Flower process's HTTP API, beside a real worker and scheduler."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from bus.core.settings import Settings
from bus.delivery.report import DeliveryReport, Work, works_of
from bus.ops.flower import flower_argv, flower_env
from bus.surfaces.harness.listener import Listener
from tests.support.celery_bus import Scheduler, celery_bus
from tests.support.listeners import collect
from tests.support.local_servers import free_port
from tests.support.sessions import running_with_an_unwritable_floor
from tests.support.waiting import wait_for
from tests.support.worker_proc import WorkerProcess
from workers.events import NAMED_SESSIONS, sessions_repr

AUTH = ("ops", "flower-pw")


def _report(sid: str, *notices: dict[str, Any], busy: bool = False) -> DeliveryReport:
    return DeliveryReport(session=sid, notices=list(notices), busy=busy)


SOCK = {"via": "socket", "messages": 2, "wake": False, "reason": "notice"}
FLOOR = {"via": "file", "messages": 1, "wake": False, "reason": "notice"}
WAKE = {"via": "file", "messages": 1, "wake": True, "reason": "debounce"}
FLUSH = {"via": "file", "messages": 3, "wake": True, "reason": "flush"}


@pytest.mark.parametrize(
    ("reports", "expected"),
    [
        ([], []),
        ([_report("a", SOCK)], [Work("deliver", ("a",), socket=1, messages=2)]),
        (
            [_report("a", SOCK), _report("b", FLOOR), _report("c")],
            [Work("deliver", ("a", "b"), socket=1, floor=1, messages=3)],
        ),
        # A run that delivered nothing (a look at an undrained floor) is no task, nor is a
        # failure repeated with the same reason (its retry backed off).
        ([_report("c"), DeliveryReport("r", repeated=["floor: OSError: full"])], []),
        (
            [_report("w", WAKE), _report("f", FLUSH), _report("d", FLOOR, busy=True)],
            [
                Work("deliver", ("d",), floor=1, messages=1, handed_off=1),
                Work("wake", ("w",), floor=1, messages=1),
                Work("flush", ("f",), floor=1, messages=3),
            ],
        ),
        # A run whose notice could not be written fails apart from the others.
        (
            [_report("a", SOCK), DeliveryReport("b", errors=["floor: OSError: full"])],
            [
                Work("deliver", ("a",), socket=1, messages=2),
                Work("deliver", ("b",), errors=("b: floor: OSError: full",)),
            ],
        ),
        # A run that both woke and flushed is counted once, as the flush.
        ([_report("x", WAKE, FLUSH)], [Work("flush", ("x",), floor=2, messages=4)]),
    ],
)
def test_a_batch_is_grouped_by_the_kind_of_work(
    reports: list[DeliveryReport], expected: list[Work]
) -> None:
    assert works_of(reports) == expected


def test_a_work_result_says_what_it_did() -> None:
    work = Work("wake", ("w", "v"), socket=1, floor=1, messages=4, handed_off=1)
    assert work.result() == {
        "sessions": 2,
        "notices": {"socket": 1, "floor": 1},
        "messages": 4,
        "handed_off": 1,
    }


def test_the_sessions_named_are_bounded() -> None:
    assert json.loads(sessions_repr(["a", "b"])) == {"sessions": ["a", "b"]}
    many = [f"s{i}" for i in range(NAMED_SESSIONS + 5)]
    shown = json.loads(sessions_repr(many))["sessions"]
    assert shown[:NAMED_SESSIONS] == many[:NAMED_SESSIONS] and shown[-1] == "+5 more"


class Flower:
    def __init__(self, settings: Settings) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            flower_argv(settings, "127.0.0.1", self.port),
            env=flower_env(settings, auth=":".join(AUTH)),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", auth=AUTH, timeout=10)
        wait_for(self._answers, timeout=60, what="flower to answer", interval=0.2)

    def _answers(self) -> bool:
        assert self.proc.poll() is None, "flower exited"
        try:
            return self.client.get("/api/tasks").status_code == 200
        except httpx.TransportError:
            return False

    def tasks(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = self.client.get("/api/tasks").json()
        return out

    def workers(self) -> dict[str, dict[str, Any]]:
        data = self.client.get("/workers", params={"json": 1}).json()["data"]
        return {w["hostname"]: w for w in data}

    def stop(self) -> None:
        self.client.close()
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)


@pytest.fixture
def flower(settings: Settings) -> Iterator[Flower]:
    f = Flower(settings)
    yield f
    f.stop()


def _reported(task: dict[str, Any]) -> bool:
    """A kick-list batch's task (its kwargs name its sessions), not a Celery task's."""
    return str(task.get("kwargs") or "").startswith('{"sessions"')


def _named(tasks: dict[str, dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [t for t in tasks.values() if t.get("name") == name and _reported(t)]


def _served(task: dict[str, Any]) -> list[str]:
    return list(json.loads(task["kwargs"])["sessions"])


def _kick_list_live(bus: Any, flower: Flower) -> None:
    """Until the worker's kick loops say they are alive, kicks go to Celery (real tasks):
    a message a half second to a spare session until one comes through the kick list."""
    bus.open_session("warm")

    def through_the_list() -> bool:
        bus.send({"from": "me:sh", "to_id": "warm", "text": "hi", "class": "action"})
        return any("warm" in _served(t) for t in _named(flower.tasks(), "inbox.deliver"))

    wait_for(through_the_list, timeout=30, what="a kick-list delivery in flower", interval=0.5)


@pytest.mark.slow
def test_flower_shows_deliveries_wakes_and_flushes_under_the_worker(
    settings: Settings,
    start_worker: Callable[..., WorkerProcess],
    flower: Flower,
    tmp_path: Any,
) -> None:
    worker = start_worker(settings)
    bus = celery_bus(settings)
    sch = Scheduler(settings)
    try:
        wait_for(lambda: flower.workers(), timeout=30, what="flower to see the worker")
        [node] = flower.workers()
        _kick_list_live(bus, flower)
        for sid in ("live", "sleepy", "later"):
            bus.open_session(sid)
        bus.turn("live", "start")
        heard: list[dict[str, Any]] = []
        listener = Listener(settings.home / "inbox" / "live" / "inbox.sock", collect(heard))
        listener.start()
        try:
            bus.send({"from": "me:sh", "to_id": "live", "text": "mid-turn", "class": "action"})
            bus.send({"from": "me:sh", "to_id": "sleepy", "text": "look", "class": "blocker"})
            bus.send({"from": "me:sh", "to_id": "later", "text": "fyi", "class": "fyi"})

            def seen() -> dict[str, list[dict[str, Any]]] | None:
                tasks = flower.tasks()
                kinds = {n: _named(tasks, f"inbox.{n}") for n in ("deliver", "wake", "flush")}
                return kinds if all(kinds.values()) else None

            kinds = wait_for(seen, timeout=30, what="a delivery, a wake and a flush in flower")
        finally:
            listener.stop()
    finally:
        sch.stop()
    assert isinstance(kinds, dict)
    # Each session's tasks: (name, result); a session may also have empty deliveries.
    by_session: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for name, tasks in kinds.items():
        for task in tasks:
            assert task["state"] == "SUCCESS" and task["worker"] == node
            assert task["runtime"] is not None and task["runtime"] >= 0
            result = json.loads(task["result"].strip("'\""))
            for sid in _served(task):
                by_session.setdefault(sid, []).append((name, result))
    live = [r for n, r in by_session["live"] if n == "deliver"]
    assert any(r["notices"]["socket"] + r["notices"]["floor"] == 1 for r in live)
    assert ("wake", 1) in [(n, r["notices"]["floor"]) for n, r in by_session["sleepy"]]
    assert "flush" in [n for n, _ in by_session["later"]]
    assert "wake" not in [n for n, _ in by_session["live"] + by_session["later"]]
    # The dashboard's counters moved with them.
    counts = flower.workers()[node]
    assert counts.get("task-received", 0) >= 3 and counts.get("task-succeeded", 0) >= 3
    assert counts.get("task-failed", 0) == 0

    # A frozen host's worker goes offline in Flower.
    os.killpg(worker.proc.pid, signal.SIGSTOP)
    try:
        wait_for(
            lambda: not flower.workers()[node]["status"],
            timeout=30,
            what="flower to show the frozen worker offline",
            interval=0.5,
        )
    finally:
        os.killpg(worker.proc.pid, signal.SIGCONT)


@pytest.mark.slow
def test_a_failed_delivery_is_a_failure_with_its_reason(
    settings: Settings, start_worker: Callable[..., WorkerProcess], flower: Flower
) -> None:
    start_worker(settings)
    bus = celery_bus(settings)
    _kick_list_live(bus, flower)
    bus.open_session("doomed")
    # Its floor file cannot be written: the delivery's notice raises.
    floor = settings.home / "inbox" / "doomed" / "messages.jsonl"
    floor.unlink(missing_ok=True)
    floor.mkdir(parents=True)
    bus.turn("doomed", "start")  # running: its notice is written at once
    bus.send({"from": "me:sh", "to_id": "doomed", "text": "x", "class": "action"})

    def failed() -> list[dict[str, Any]]:
        return [t for t in flower.tasks().values() if t.get("state") == "FAILURE"]

    got = wait_for(failed, timeout=30, what="a FAILURE in flower")
    assert isinstance(got, list)
    task = got[0]
    assert task["name"] == "inbox.deliver" and "doomed" in task["kwargs"]
    assert "IsADirectoryError" in task["exception"]


def test_a_celery_delivery_that_could_not_do_its_work_fails(
    make_bus: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from bus.store.outage_log import OUTAGE_ERRORS
    from workers import tasks

    bus = make_bus()
    running_with_an_unwritable_floor(bus, "doomed")
    with pytest.raises(tasks.DeliveryFailed, match="doomed: floor: IsADirectoryError"):
        tasks._deliver_one(bus, "doomed")

    def away(_sid: str) -> None:
        raise OUTAGE_ERRORS[0]("gone")

    monkeypatch.setattr(bus, "deliver_session", away)
    with pytest.raises(tasks.DeliveryFailed, match="Redis unavailable"):
        tasks._deliver_one(bus, "doomed")
