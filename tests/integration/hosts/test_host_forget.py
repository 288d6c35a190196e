"""``inbox host forget HOST`` on a real store: a down host without open sessions leaves
``inbox status`` with every key it had; an up host, a host with sessions open and an
unknown one are refused in the one refusal shape, and nothing is written."""

from __future__ import annotations

import json
import subprocess
import sys

from bus.api import Bus
from bus.core.models import now_ms
from bus.core.settings import Settings
from bus.core.status_view import host_queue


def inbox(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    env = settings.child_env()
    env["INBOX_DISPATCHER"] = "none"
    return subprocess.run(
        [sys.executable, "-m", "bus", *args], env=env, capture_output=True, text=True, timeout=60
    )


def keys_of(bus: Bus, host: str) -> set[str]:
    """Every key of the store that names ``host`` (its beats, claims, kick list, queue)."""
    found = {str(k) for k in bus.store.r.scan_iter(f"{bus.settings.key_prefix}:*")}
    return {k for k in found if host in k.split(":", 1)[1]}


def retired(bus: Bus, host: str) -> None:
    """``host``'s processes as they leave the store when they stop for good: beats a
    minute old, a refused worker noted, a kick loop's taken kicks, queued deliveries."""
    then = now_ms() - 60_000
    s, k = bus.store, bus.store.k
    s.schedule.beat(host, {"beat": then, "pid": 1})
    s.schedule.beat(f"scheduler.{host}", {"beat": then})
    s.r.hset(k.host_refused(host), mapping={"floor": "m\t/h", "at": then})
    s.r.rpush(k.kick_list(host), "gone1")
    s.r.hset(k.kick_loops(host), "loop1", then)
    s.r.rpush(k.kick_taken(host, "loop1"), "gone2")
    s.r.rpush(k.celery_queue(host_queue(host)), "task1", "task2")


def names(bus: Bus) -> set[str]:
    return {row["name"] for row in bus.status()["workers"]}


def test_a_down_host_is_forgotten_and_its_closed_sessions_kept(bus: Bus) -> None:
    bus.store.schedule.beat("hosta", {"beat": now_ms()})
    retired(bus, "hostb")
    bus.open_session("gone", host="hostb")
    bus.close_session("gone")
    assert {"hostb", "scheduler.hostb"} <= names(bus)

    out = inbox(bus.settings, "host", "forget", "hostb")
    assert out.returncode == 0, out.stdout + out.stderr
    answer = json.loads(out.stdout)
    assert answer["ok"] is True and answer["host"] == "hostb"
    assert answer["forgotten"] == ["hostb", "scheduler.hostb"]
    assert answer["queued"] == 2 and answer["closed_sessions"] == 1
    assert keys_of(bus, "hostb") == set()
    assert names(bus) == {"hosta"}
    assert bus.store.sessions.get_session("gone") is not None  # its record and threads stay

    again = inbox(bus.settings, "host", "forget", "hostb")  # nothing left to forget
    assert again.returncode == 1 and json.loads(again.stdout)["error"] == "not_found"


def test_an_up_host_a_host_with_open_sessions_and_a_bad_name_are_refused(bus: Bus) -> None:
    bus.store.schedule.beat("hosta", {"beat": now_ms()})
    retired(bus, "hostb")
    bus.open_session("still", host="hostb")
    before = {k: bus.store.r.type(k) for k in keys_of(bus, "hostb")}

    up = inbox(bus.settings, "host", "forget", "hosta")
    assert up.returncode == 1
    said = json.loads(up.stdout)
    assert (said["ok"], said["error"], said["state"]) == (False, "host_not_down", "up")
    assert "only a host that is down may be forgotten" in up.stderr

    busy = inbox(bus.settings, "host", "forget", "hostb")
    assert busy.returncode == 1
    said = json.loads(busy.stdout)
    assert said["error"] == "host_has_sessions" and said["sessions"] == ["still"]
    assert "inbox session close SID" in busy.stderr

    bad = inbox(bus.settings, "host", "forget", "scheduler.hostb")
    assert bad.returncode == 2 and json.loads(bad.stdout)["error"] == "bad_input"

    assert {k: bus.store.r.type(k) for k in keys_of(bus, "hostb")} == before  # nothing written
    assert {"hosta", "hostb", "scheduler.hostb"} <= names(bus)

    bus.close_session("still")
    assert bus.forget_host("hostb")["forgotten"] == ["hostb", "scheduler.hostb"]
    assert names(bus) == {"hosta"}
