"""Durability levels of an acknowledged send on servers of the test's own: the answer says
the level met, a level not met is refused ``not_durable`` (exit 1, resending the id safe),
a server without WAITAOF is said, a ``--jsonl`` burst waits once per round trip."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import redis

from bus.core.errors import NotDurable
from bus.core.settings import Settings
from tests.support.cli import inbox_entry as cli
from tests.support.durable_servers import bus_on, server, version_of, waitaof_binary


@pytest.fixture
def aof_url(tmp_path: Path) -> Iterator[str]:
    with server(waitaof_binary(), tmp_path / "aof", "--appendonly", "yes") as (url, _proc):
        yield url


def waitaofs(url: str) -> int:
    stats = redis.Redis.from_url(url).info("commandstats")
    return int(stats.get("cmdstat_waitaof", {}).get("calls", 0))


def test_the_answer_says_the_level_met(settings: Settings, aof_url: str) -> None:
    b = bus_on(settings, aof_url)
    msg = {"from": "hosta:alice", "to": "hosta:bob", "text": "hi"}
    assert b.send(msg)["durable"] == "memory"  # INBOX_DURABILITY's default
    assert waitaofs(aof_url) == 0  # memory waits for nothing
    assert b.send(msg, durability="disk")["durable"] == "disk"
    assert waitaofs(aof_url) == 1
    disk = replace(b.settings, durability="disk")
    done = cli(disk, "send", "--from", "hosta:alice", "--to", "hosta:bob", "--text", "x")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["durable"] == "disk"
    assert waitaofs(aof_url) == 2
    # The per-send option over the deployment's level.
    done = cli(disk, "send", "--to", "hosta:bob", "--text", "y", "--durability", "memory")
    assert json.loads(done.stdout)["durable"] == "memory" and waitaofs(aof_url) == 2


def test_a_level_not_met_is_refused_and_resending_the_id_is_safe(
    settings: Settings, tmp_path: Path
) -> None:
    with server(waitaof_binary(), tmp_path / "noaof") as (url, _proc):  # appendonly no
        b = bus_on(settings, url, durability="disk")
        mid = "msg_durable_resend_1"
        argv = ("send", "--from", "hosta:alice", "--to", "hosta:bob", "--text", "k", "--id", mid)
        done = cli(b.settings, *argv)
        assert done.returncode == 1, done.stderr
        answer = json.loads(done.stdout)
        assert answer["ok"] is False and answer["error"] == "not_durable"
        assert answer["level"] == "disk" and answer["ids"] == [mid]
        [line] = done.stderr.splitlines()  # one line, no traceback
        assert "appendonly no" in line and f"--id {mid}" in line and "at most once" in line
        with pytest.raises(NotDurable):
            b.send({"from": "hosta:alice", "to": "hosta:bob", "text": "k", "id": mid})
        redis.Redis.from_url(url).config_set("appendonly", "yes")
        again = cli(b.settings, *argv)
        assert again.returncode == 0, again.stderr
        resent = json.loads(again.stdout)
        assert resent["durable"] == "disk" and resent["duplicate"] is True
        assert b.store.r.xlen(b.store.k.s("bob", "stream")) == 1  # stored once


def test_replica_level_without_a_replica_is_refused_within_the_bound(
    settings: Settings, aof_url: str
) -> None:
    b = bus_on(settings, aof_url, durability="replica")
    with pytest.raises(NotDurable, match=r"no replica acknowledged it within 0\.5s"):
        b.send({"from": "hosta:alice", "to": "hosta:bob", "text": "r"})
    with pytest.raises(NotDurable):  # a waited send is not waited for either
        b.send({"from": "hosta:alice", "to": "hosta:bob", "text": "w"}, wait=True, timeout=5)
    assert b.store.r.smembers(b.store.k.s("bob", "waiters")) == set()
    with pytest.raises(NotDurable) as batch:
        b.send_many([{"from": "hosta:alice", "to": "hosta:bob", "text": f"{i}"} for i in range(3)])
    assert len(batch.value.details["ids"]) == 3


OLD = shutil.which("redis-server")


@pytest.mark.skipif(
    not OLD or version_of(OLD) >= (7, 2), reason="needs a redis-server older than 7.2"
)
def test_a_server_without_waitaof_meets_disk_only_fsyncing_always(
    settings: Settings, tmp_path: Path
) -> None:
    assert OLD is not None
    with server(OLD, tmp_path / "old", "--appendonly", "yes") as (url, _proc):
        b = bus_on(settings, url)
        msg = {"from": "hosta:alice", "to": "hosta:bob", "text": "o"}
        with pytest.raises(NotDurable, match=r"has no WAITAOF .* does not run appendfsync always"):
            b.send(msg, durability="disk")
        redis.Redis.from_url(url).config_set("appendfsync", "always")
        fresh = bus_on(settings, url)  # asked once per client: a new one asks again
        assert fresh.send(msg, durability="disk")["durable"] == "disk"


def test_a_jsonl_burst_waits_once_per_round_trip(settings: Settings, aof_url: str) -> None:
    b = bus_on(settings, aof_url)
    b.send({"from": "hosta:alice", "to": "hosta:bob", "text": "first"})  # bob's record read
    lines = "".join(
        json.dumps({"from": "hosta:alice", "to": "hosta:bob", "text": f"n{i}"}) + "\n"
        for i in range(300)
    )
    done = cli(b.settings, "send", "--jsonl", "-", "--durability", "disk", stdin=lines)
    assert done.returncode == 0, done.stderr
    answers = [json.loads(x) for x in done.stdout.splitlines()]
    assert len(answers) == 300 and {a["durable"] for a in answers} == {"disk"}
    # A wait per chunk's round trip (a chunk is what one read brings; a receiver whose
    # record this process never read costs its chunk a second), not one per message.
    assert 1 <= waitaofs(aof_url) <= 4
    assert os.environ.get("INBOX_DURABILITY") is None  # the test's own levels only


def test_http_sends_carry_the_level_and_its_refusal(settings: Settings, aof_url: str) -> None:
    from fastapi.testclient import TestClient

    from bus.surfaces.http.gateway import create_app

    b = bus_on(settings, aof_url)
    msg = {"from": "hosta:alice", "to": "hosta:bob", "text": "h"}
    with TestClient(create_app(b), base_url="http://127.0.0.1") as client:
        got = client.post("/v1/send", json={**msg, "durability": "disk"})
        assert got.status_code == 200 and got.json()["durable"] == "disk"
        refused = client.post("/v1/send", json={**msg, "durability": "replica"})
        assert refused.status_code == 503 and refused.json()["error"] == "not_durable"
        batch = client.post("/v1/send/batch?durability=disk", json=[msg, msg])
        assert {a["durable"] for a in batch.json()["answers"]} == {"disk"}
        bad = client.post("/v1/send", json={**msg, "durability": "fsync"})
        assert bad.status_code == 400 and bad.json()["error"] == "bad_durability"


def test_doctor_says_a_level_the_store_cannot_meet(settings: Settings, tmp_path: Path) -> None:
    with server(waitaof_binary(), tmp_path / "noaof") as (url, _proc):  # appendonly no
        b = bus_on(settings, url, durability="disk")
        done = cli(b.settings, "doctor")
        assert done.returncode == 1, done.stdout + done.stderr
        said = json.loads(done.stdout)
        assert said["error"] == "not_durable"
        [row] = [p for p in said["problems"] if p["check"] == "durability"]
        assert "appendonly no" in row["reason"] and "INBOX_DURABILITY" in row["fix"]
        assert "appendonly no" in done.stderr.splitlines()[0]
        memory = cli(replace(b.settings, durability="memory"), "doctor")
        assert not [
            p for p in json.loads(memory.stdout).get("problems", []) if p["check"] == "durability"
        ]
