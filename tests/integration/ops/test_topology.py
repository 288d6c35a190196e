"""compose/: the docker-compose file (parsed, as no Docker engine runs here) and the same
topology as local processes (bus/ops/topology.py, compose/local.py), end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from bus.ops.topology import Topology, start_topology
from tests.support.waiting import wait_for

COMPOSE = Path(__file__).resolve().parents[3] / "compose"
FAST = {"INBOX_WAKE_DEBOUNCE_S": "0.3", "INBOX_FYI_FLUSH_S": "2", "INBOX_RETRY_S": "0.5"}
# The suite's Redis is shared: a scheduler started on it leaves the server's settings alone
# (CONFIG SET of the memory settings is for servers of a test's own, as the embedded one).
SHARED = {**FAST, "INBOX_MEMORY_SETTINGS": "0"}


def command(service: dict[str, Any]) -> str:
    cmd = service.get("command", "")
    return " ".join(cmd) if isinstance(cmd, list) else str(cmd)


def test_compose_file() -> None:
    services: dict[str, dict[str, Any]] = yaml.safe_load(
        (COMPOSE / "docker-compose.yml").read_text()
    )["services"]
    redis_svc = services["redis"]
    assert redis_svc["image"] == "redis:7"
    assert "--appendonly yes" in command(redis_svc)
    assert any(v.endswith(":/data") for v in redis_svc["volumes"])

    for name, svc in services.items():
        if name != "redis":
            assert svc["environment"]["INBOX_REDIS_URL"] == "redis://redis:6379/0", name

    workers = {n: s for n, s in services.items() if command(s) == "inbox worker"}
    assert set(workers) == {"worker-a", "worker-b"}
    floors = {}
    for svc in workers.values():
        env = svc["environment"]
        assert env["INBOX_HOME"] == "/data"
        (volume,) = [v.split(":")[0] for v in svc["volumes"] if v.endswith(":/data")]
        floors[env["INBOX_HOST"]] = volume
    assert set(floors) == {"a", "b"}
    assert len(set(floors.values())) == len(floors)  # every host its own floor

    upgrade = services["upgrade"]  # the store's data upgraded before the workers start
    assert command(upgrade) == "inbox upgrade" and upgrade["restart"] == "no"
    for name in ("worker-a", "worker-b", "scheduler"):
        after = services[name]["depends_on"]["upgrade"]
        assert after == {"condition": "service_completed_successfully"}, name

    schedulers = [s for s in services.values() if command(s) == "inbox scheduler"]
    assert len(schedulers) == 1
    assert schedulers[0].get("deploy", {}).get("replicas", 1) == 1

    flower = services["flower"]
    assert command(flower).startswith("celery -A workers flower")
    assert flower["environment"]["FLOWER_BASIC_AUTH"].startswith("${FLOWER_AUTH:?")
    assert "basic-auth" not in command(flower)
    assert flower["ports"] == ["127.0.0.1:5555:5555"]

    gateway = services["gateway"]
    assert command(gateway) == "inbox serve --host 0.0.0.0 --port 5252"
    for svc in services.values():
        for port in svc.get("ports", []):
            assert str(port).startswith("127.0.0.1:")  # published on loopback only

    dockerfile = (COMPOSE / "Dockerfile").read_text()
    assert dockerfile.startswith("#") and "FROM python:3.11-slim" in dockerfile
    assert "RUN pip install .\n" in dockerfile  # the base installs everything: no extra
    extras = tomllib.loads((COMPOSE.parent / "pyproject.toml").read_text())["project"]
    assert all(extras["optional-dependencies"].values())  # no empty extra kept for a name


def cli(topo: Topology, host: str, *args: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-m", "bus.surfaces.cli.app", *args],
        env=topo.env_for(host),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    answer: dict[str, object] = json.loads(done.stdout)
    return answer


def floor_text(topo: Topology, host: str, sid: str) -> str:
    path = topo.home(host) / "inbox" / sid / "messages.jsonl"
    return path.read_text() if path.exists() else ""


def assert_all_gone(topo: Topology, pids: list[int]) -> None:
    assert topo.children == []
    for pid in pids:
        # Each child led its own process group; nothing of it (a worker's pool) is left.
        with pytest.raises(ProcessLookupError):
            os.killpg(pid, 0)


@pytest.mark.slow
def test_two_hosts_deliver_on_the_receivers_floor(
    tmp_path: Path, redis_url: str, prefix: str
) -> None:
    topo = start_topology(
        tmp_path / "topo", ["a", "b"], key_prefix=prefix, redis_url=redis_url, env=SHARED
    )
    pids = [c.proc.pid for c in topo.children]
    try:
        assert {c.name for c in topo.children} == {"worker-a", "worker-b", "scheduler"}
        assert topo.env_for("a")["INBOX_MEMORY_SETTINGS"] == "0"  # the shared server left alone
        assert topo.env_for("b")["INBOX_HOME"] == str(tmp_path / "topo" / "b")

        sid = f"sess-{uuid.uuid4().hex[:8]}"
        opened = cli(topo, "a", "session", "open", sid, "--host", "b")
        assert opened["session"]["host"] == "b"  # type: ignore[index]
        sent = cli(topo, "a", "send", "--to-id", sid, "--from", "a:me", "--text", "hi")
        assert sent["state"] == "stored"
        wait_for(lambda: str(sent["id"]) in floor_text(topo, "b", sid), what="the line on b")
        assert not (topo.home("a") / "inbox" / sid).exists()

        # `celery call send` from host a's environment, to another session on b.
        sid2 = f"sess-{uuid.uuid4().hex[:8]}"
        cli(topo, "b", "session", "open", sid2)
        msg_id = str(uuid.uuid4())
        kwargs = {"from": "a:celery", "to_id": sid2, "text": "via celery", "id": msg_id}
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "workers",
                "call",
                "send",
                "--kwargs",
                json.dumps(kwargs),
            ],
            env=topo.env_for("a"),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        wait_for(lambda: msg_id in floor_text(topo, "b", sid2), what="the celery send on b")
        assert not (topo.home("a") / "inbox" / sid2).exists()
    finally:
        topo.stop()
    assert_all_gone(topo, pids)


@pytest.mark.slow
def test_embedded_redis_persists_and_stops(tmp_path: Path) -> None:
    prefix = f"t{uuid.uuid4().hex[:10]}"
    with start_topology(tmp_path / "t", ["solo"], key_prefix=prefix, env=FAST) as topo:
        pids = [c.proc.pid for c in topo.children]
        assert topo.redis is not None
        assert redis.Redis.from_url(topo.redis_url).ping()
        cli(topo, "solo", "session", "open", "demo")
        sent = cli(topo, "solo", "send", "--to-id", "demo", "--from", "solo:me", "--text", "hi")
        wait_for(lambda: str(sent["id"]) in floor_text(topo, "solo", "demo"), what="the line")
        server = topo.redis.proc
        assert server is not None
    assert server.poll() is not None
    assert_all_gone(topo, pids)
    assert list((tmp_path / "t" / "redis").glob("appendonly*"))  # persistence was on


@pytest.mark.slow
def test_local_script_runs_in_the_foreground_and_stops_on_sigterm(
    tmp_path: Path, redis_url: str, prefix: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INBOX_")}
    env.update({"INBOX_REDIS_URL": redis_url, "INBOX_KEY_PREFIX": prefix})
    env["INBOX_MEMORY_SETTINGS"] = "0"  # the suite's shared Redis: its settings left alone
    script = COMPOSE / "local.py"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(script),
            "--hosts",
            "x,y",
            "--dir",
            str(tmp_path / "d"),
            "--concurrency",
            "1",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        lines: list[str] = []
        for line in proc.stdout:
            lines.append(line)
            if "Ctrl-C stops everything" in line:
                break
        text = "".join(lines)
        assert f"export INBOX_REDIS_URL={redis_url}" in text
        assert f"export INBOX_HOME={tmp_path / 'd' / 'y'}" in text
        assert "export INBOX_MEMORY_SETTINGS=0" in text  # its environment's settings passed on
        proc.terminate()
        rest, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, text + rest
        assert "stopped" in rest
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
