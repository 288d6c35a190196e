"""One host, one floor: a second worker for a host with another home is refused; a
worker whose home disappears stops serving it. Real Redis, real Celery workers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from bus.api import Bus
from bus.core.settings import SOURCE_ROOT, Settings
from bus.telemetry.host_floor import (
    EXIT_HOME_GONE,
    EXIT_HOST_TAKEN,
    HomeId,
    floor_id,
    refusal_text,
    stop_reason,
)
from tests.support.waiting import wait_for
from tests.support.worker_proc import WorkerProcess, inbox_worker_argv
from workers.app import make_app
from workers.dispatch import CeleryDispatcher

A, B = HomeId(1, 10), HomeId(1, 11)


@pytest.mark.parametrize(
    ("started", "now", "holder", "reason"),
    [
        (A, A, None, None),
        (A, None, None, "home_gone"),
        (A, B, None, "home_replaced"),
        (A, A, {"floor": "m\t/other", "pid": "7"}, "host_taken"),
        (A, None, {"floor": "m\t/other", "pid": "7"}, "home_gone"),
    ],
)
def test_why_a_serving_worker_stops(
    started: HomeId, now: HomeId | None, holder: dict[str, str] | None, reason: str | None
) -> None:
    assert stop_reason(started=started, now=now, holder=holder) == reason


@pytest.mark.parametrize(
    ("holder", "says", "not_says"),
    [
        (
            {"floor": "box\t/h/one", "pid": "42"},
            ["pid 42", "INBOX_HOME /h/one"],
            ["/h/one on machine"],
        ),
        ({"floor": "other\t/h/one", "pid": "42"}, ["on machine other"], []),
    ],
)
def test_the_refusal_names_who_serves_the_host(
    holder: dict[str, str], says: list[str], not_says: list[str]
) -> None:
    text = refusal_text("hosta", floor_id("box", "/h/two"), holder)
    for part in [*says, "host hosta", "INBOX_HOME /h/two"]:
        assert part in text
    for part in not_says:
        assert part not in text


def floor_ids(home: Path, sid: str) -> list[str]:
    path = home / "inbox" / sid / "messages.jsonl"
    if not path.exists():
        return []
    return [json.loads(line)["id"] for line in path.read_text().splitlines() if line.strip()]


def _worker(s: Settings, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        inbox_worker_argv("solo", 1),
        env=s.child_env(),
        cwd=str(SOURCE_ROOT),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def homes(settings: Settings, tmp_path: Path) -> tuple[Settings, Settings]:
    one = replace(settings, agent_inbox=False, home=tmp_path / "home-one")
    two = replace(settings, agent_inbox=False, home=tmp_path / "home-two")
    return one, two


@pytest.mark.slow
def test_a_second_worker_with_another_home_is_refused_and_status_says_so(
    homes: tuple[Settings, Settings], start_worker: Callable[..., WorkerProcess]
) -> None:
    one, two = homes
    start_worker(one)
    second = _worker(two)
    assert second.returncode == EXIT_HOST_TAKEN, second.stderr[-2000:]
    assert "host hosta is already served by a worker" in second.stderr
    assert f"INBOX_HOME {one.home}" in second.stderr
    bus = Bus(one, dispatcher=CeleryDispatcher(make_app(one)))
    sids = [f"s{n}" for n in range(10)]
    for sid in sids:
        bus.open_session(sid)
    sent = {sid: bus.send({"from": "hosta:me", "to_id": sid, "text": "hi"})["id"] for sid in sids}
    wait_for(
        lambda: all(floor_ids(one.home, sid) == [sent[sid]] for sid in sids), what="every notice"
    )
    assert not (two.home / "inbox").exists()
    (row,) = [w for w in bus.status()["workers"] if w["name"] == "hosta"]
    assert row["floor"]["home"] == str(one.home)
    assert row["refused"]["home"] == str(two.home)
    assert row["refused"]["holder"]["home"] == str(one.home)

    from fastapi.testclient import TestClient

    from bus.surfaces.http.gateway import create_app

    with TestClient(create_app(bus), base_url="http://127.0.0.1") as client:
        health = client.get("/health").json()
    (hrow,) = [w for w in health["workers"] if w["name"] == "hosta"]
    assert hrow["refused"]["home"] == str(two.home)


@pytest.mark.slow
def test_a_worker_whose_home_disappears_stops_and_another_home_takes_the_host(
    homes: tuple[Settings, Settings], start_worker: Callable[..., WorkerProcess]
) -> None:
    one, two = homes
    first = start_worker(one)
    bus = Bus(two, dispatcher=CeleryDispatcher(make_app(two)))
    shutil.rmtree(one.home)
    code = first.proc.wait(60)
    assert code == EXIT_HOME_GONE
    assert any(f"its INBOX_HOME {one.home} is gone" in line for line in first.log)
    assert not bus.store.schedule.host_floors(["hosta"])[0][0]  # the claim was given up
    start_worker(two)  # not refused: nobody serves the host now
    bus.open_session("s1")
    sent = bus.send({"from": "hosta:me", "to_id": "s1", "text": "hi"})
    wait_for(lambda: floor_ids(two.home, "s1") == [sent["id"]], what="the notice on home two")
    assert not one.home.exists()


@pytest.mark.slow
def test_inbox_up_exits_non_zero_when_another_floor_serves_its_host(
    homes: tuple[Settings, Settings], start_worker: Callable[..., WorkerProcess]
) -> None:
    one, two = homes
    start_worker(one)
    env = {k: v for k, v in os.environ.items() if not k.startswith("INBOX_")}
    env.update(two.child_env())
    up = subprocess.run(
        [sys.executable, "-m", "bus.surfaces.cli.app", "up", "--concurrency", "1"],
        env=env,
        cwd=str(SOURCE_ROOT),
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = up.stdout + up.stderr
    assert up.returncode == EXIT_HOST_TAKEN, out[-3000:]
    assert "host hosta is already served by a worker" in out
    assert "another floor serves host hosta; stopping" in out
