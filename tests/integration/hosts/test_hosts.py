"""Hosts as an operator sees them: a host whose worker stops beating is ``down`` in status,
a send's answer and its receipt; the doctor finds down hosts, unserved sessions, floors
that cannot be written, long-waiting messages and wakes no harness took, and exits 1;
/metrics has the same figures; a failing floor's retry backs off and fails once per
reason."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from typing import Any

import pytest

from bus.api import Bus
from bus.core.models import now_ms
from bus.core.settings import Settings
from bus.telemetry.problems import counts, operator_problems
from tests.support.cli import ENTRY, inbox_as
from tests.support.sessions import running_with_an_unwritable_floor


def inbox(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return inbox_as(settings, *args, module=ENTRY)


def test_a_down_host_in_status_send_receipt_doctor_and_metrics(bus: Bus) -> None:
    bus.open_session("alive", host="hosta")
    bus.open_session("stuck", host="hostb")
    bus.open_session("nobody", host="ghost")  # no worker ever served this host
    now = now_ms()
    bus.store.schedule.beat("hosta", {"beat": now})
    bus.store.schedule.beat("hostb", {"beat": now - 60_000})  # beat a minute ago: down
    bus.store.schedule.beat("scheduler.hostb", {"beat": now - 60_000})

    rows = {r["name"]: r for r in bus.status()["workers"]}
    assert rows["hosta"]["state"] == "up" and rows["hostb"]["state"] == "down"
    assert rows["scheduler.hostb"]["role"] == "scheduler"
    assert rows["scheduler.hostb"]["host"] == "hostb"

    up = bus.send({"from": "me:sh", "to_id": "alive", "text": "hi"})
    assert up["recipient"]["host_state"] == "up"
    down = bus.send({"from": "me:sh", "to_id": "stuck", "text": "hi"})
    assert down["recipient"]["host_state"] == "down"

    # The command line: the answer on stdout, one line on stderr saying what it means.
    out = inbox(bus.settings, "send", "--to-id", "stuck", "--from", "me:sh", "--text", "x")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["recipient"]["host_state"] == "down"
    assert out.stderr.count("\n") == 1 and "host hostb is down" in out.stderr
    bus.open_session("asker", host="hosta")
    asked = bus.send(
        {"from": "hosta:asker", "from_session": "asker", "to_id": "stuck", "text": "?"}
    )
    rc = bus.receipt(asked["id"], by="asker")
    assert rc["recipient"]["host_state"] == "down" and "hostb" in rc["waiting"]

    doctor = inbox(bus.settings, "doctor")
    assert doctor.returncode == 1, doctor.stdout + doctor.stderr
    answer = json.loads(doctor.stdout)
    assert answer["error"] == "problems"
    found = {(p["check"], p.get("session") or p.get("host")) for p in answer["problems"]}
    assert ("host", "hostb") in found and ("unserved", "nobody") in found
    assert ("host", "hosta") not in found

    from prometheus_client import CollectorRegistry, generate_latest

    from bus.telemetry.metrics import RedisCollector

    registry = CollectorRegistry()
    registry.register(RedisCollector(lambda: bus.store))
    text = generate_latest(registry).decode()
    assert 'inbox_host_up{host="hosta"} 1.0' in text
    assert 'inbox_host_up{host="hostb"} 0.0' in text
    assert 'inbox_problems{check="host"} 1.0' in text
    assert 'inbox_problems{check="unserved"} 1.0' in text


NOW = 10_000_000
UP = {"name": "a", "role": "worker", "state": "up", "beat_age_s": 1.0}
DOWN = {"name": "b", "role": "worker", "state": "down", "beat_age_s": 42.0}


def sess(sid: str, host: str = "a", **fields: Any) -> dict[str, Any]:
    return {"session": sid, "host": host, "state": "idle", **fields}


@pytest.mark.parametrize(
    ("name", "workers", "sessions", "oldest", "checks"),
    [
        ("all well", [UP], [sess("s")], [NOW - 1000], []),
        ("a host down", [UP, DOWN], [sess("s", "b")], [None], ["host"]),
        ("a host down with work queued", [UP, {**DOWN, "queue": 2}], [sess("s")], [None],
         ["host"]),
        ("a retired host: down, nothing open nor queued", [UP, DOWN],
         [sess("s"), sess("t", "b", state="closed")], [None, None], []),
        ("a host nobody serves", [UP], [sess("s", "z")], [None], ["unserved"]),
        ("a closed session is nobody's problem", [UP], [sess("s", "z", state="closed")],
         [NOW - 10**9], []),
        ("a floor that cannot be written", [UP],
         [sess("s", fault="floor: IsADirectoryError: x", fault_at=5, faults=3)], [None],
         ["floor"]),
        ("a message waiting past the bound", [UP], [sess("s")], [NOW - 1801_000], ["waiting"]),
        ("just inside the bound", [UP], [sess("s")], [NOW - 1800_000], []),
        ("woken, no turn", [UP], [sess("s", state="running", woken_at=NOW - 61_000)], [None],
         ["woken"]),
        ("woken just now", [UP], [sess("s", state="running", woken_at=NOW - 5_000)], [None], []),
        ("schedulers are not hosts", [UP, {**DOWN, "name": "scheduler.b", "role": "scheduler"}],
         [sess("s")], [None], []),
    ],
)  # fmt: skip
def test_operator_problems(
    name: str,
    workers: list[dict[str, Any]],
    sessions: list[dict[str, Any]],
    oldest: list[int | None],
    checks: list[str],
) -> None:
    found = operator_problems(workers, sessions, oldest, NOW)
    assert [p["check"] for p in found] == checks
    assert all(p["reason"] and p["fix"] for p in found)
    assert sum(counts(found).values()) == len(checks)


def test_a_failing_floor_backs_off_and_fails_once_per_reason(
    make_bus: Callable[..., Bus],
) -> None:
    from workers import tasks

    bus = make_bus()
    floor = running_with_an_unwritable_floor(bus, "doomed")
    with pytest.raises(tasks.DeliveryFailed, match="IsADirectoryError"):
        tasks._deliver_one(bus, "doomed")
    info = bus.store.sessions.get_session("doomed")
    assert info is not None and info.faults == 1 and "IsADirectoryError" in (info.fault or "")
    first_at = info.fault_at

    # The same failure again, its retry due: no new FAILURE (the task answers), and the
    # next retry backs off.
    bus.store.sessions.update_session("doomed", retry_at=now_ms() - 1)
    before = now_ms()
    report = tasks._deliver_one(bus, "doomed")
    assert report["errors"] == [] and "IsADirectoryError" in report["repeated"][0]
    info = bus.store.sessions.get_session("doomed")
    assert info is not None and info.faults == 2 and info.fault_at == first_at
    retry_at = int(bus.store.r.hget(bus.store.k.s("doomed", "session"), "retry_at"))
    assert retry_at >= before + 2 * bus.settings.retry_s * 1000 - 1000  # doubled

    # The floor writable again: delivered, the fault cleared.
    floor.rmdir()
    bus.store.sessions.update_session("doomed", retry_at=now_ms() - 1)
    report = tasks._deliver_one(bus, "doomed")
    assert report["errors"] == [] and report["repeated"] == []
    info = bus.store.sessions.get_session("doomed")
    assert info is not None and info.fault is None and not info.faults


def test_top_marks_a_session_whose_host_is_down(bus: Bus) -> None:
    from bus.services.watch import plain_top

    bus.open_session("here", host="hosta")
    bus.open_session("there", host="hostb")
    bus.store.schedule.beat("hosta", {"beat": now_ms()})
    bus.store.schedule.beat("hostb", {"beat": now_ms() - 60_000})
    rows = {r["session"]: r for r in bus.watch.top_rows()}
    assert (rows["here"]["host_state"], rows["there"]["host_state"]) == ("up", "down")
    lines = plain_top(list(rows.values())).splitlines()
    assert any("there" in ln and "hostb (down)" in ln for ln in lines)
    assert any("here" in ln and "hosta " in ln and "(down)" not in ln for ln in lines)


@pytest.mark.parametrize(
    ("wake_at", "state", "found"),
    [
        (NOW - 301_000, "idle", True),  # a wake's notice undrained past the bound
        (NOW - 299_000, "idle", False),
        (None, "idle", False),
        (NOW - 301_000, "closed", False),
    ],
)
def test_a_wake_notice_nobody_drained(wake_at: int | None, state: str, found: bool) -> None:
    got = operator_problems([UP], [sess("s", state=state)], [None], NOW, wake_notices=[wake_at])
    assert [p["check"] for p in got] == (["woken"] if found else [])


def test_the_store_reads_the_oldest_undrained_wake_notice(bus: Bus) -> None:
    bus.open_session("w")
    floor = bus.store.k.s("w", "floor")
    bus.store.r.hset(floor, "n1", json.dumps({"ids": ["a"], "new": [], "wake": [], "at": 5}))
    bus.store.r.hset(floor, "n2", json.dumps({"ids": ["b"], "new": [], "wake": ["b", 1], "at": 9}))
    bus.store.r.hset(floor, "n3", json.dumps({"ids": ["c"], "new": [], "wake": ["c", 1], "at": 7}))
    assert bus.store.queue.oldest_wake_notices(["w", "nobody"]) == [7, None]
