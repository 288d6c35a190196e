"""A store that refuses writes is one refusal, ``store_refused`` with its reason and fix, on
every surface (API, CLI, MCP, HTTP), never a traceback; ``inbox status`` is not ok and
names it; ``inbox doctor`` exits 1 with the fix. Faults made on a server of the test's own:
a failed save (its folder removed under it) with stop-writes-on-bgsave-error, a replica."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from bus.api import Bus
from bus.core.errors import BusError, StoreRefused
from bus.core.settings import Settings
from bus.ops.embedded import server_binary
from tests.support.cli import inbox_entry
from tests.support.durable_servers import bus_on, fail_saves, server
from tests.support.mcp_client import call, mcp_client


@pytest.fixture
def failing(settings: Settings, tmp_path: Path) -> Iterator[Bus]:
    data = tmp_path / "data"
    with server(server_binary(), data, "--save", "3600 1") as (url, _proc):
        b = bus_on(settings, url)
        fail_saves(url, data)
        yield b


MSG = {"from": "hosta:alice", "to": "hosta:bob", "text": "hi"}


def test_the_api_raises_one_refusal_with_the_reason(failing: Bus) -> None:
    with pytest.raises(StoreRefused) as refused:
        failing.send(MSG)
    assert isinstance(refused.value, BusError)
    assert refused.value.code == "store_refused" and refused.value.details["reason"] == "disk"
    assert "free space" in str(refused.value)
    with pytest.raises(StoreRefused):
        failing.send_many([MSG, MSG])


def test_the_cli_refuses_in_one_line_and_status_and_doctor_say_it(failing: Bus) -> None:
    s = failing.settings
    done = inbox_entry(s, "send", "--from", "hosta:alice", "--to", "hosta:bob", "--text", "x")
    assert done.returncode == 1
    answer = json.loads(done.stdout)
    assert answer["error"] == "store_refused" and answer["reason"] == "disk"
    [line] = done.stderr.splitlines()
    assert line.startswith("inbox: the store refuses writes") and "free space" in line
    status = inbox_entry(s, "status")
    report = json.loads(status.stdout)
    # Its reads that run scripts are refused too (the server refuses a script without
    # the no-writes flag): the refusal itself, else its storage entry, names the fault.
    assert report["ok"] is False and report.get("storage", report)["reason"] == "disk"
    assert status.returncode in (0, 1) and "Traceback" not in status.stderr
    doctor = inbox_entry(s, "doctor")
    assert doctor.returncode == 1, (doctor.stdout, doctor.stderr)
    assert doctor.stdout, doctor.stderr
    said = json.loads(doctor.stdout)
    assert said["error"] == "store_refused"
    # Its own storage row, or the refusal of its first read of the store: the fix either way.
    rows = [p for p in said.get("problems", []) if p["check"] == "storage"]
    assert "free space" in (rows[0]["fix"] if rows else said["fix"])
    assert "free space" in doctor.stderr.splitlines()[0]


def test_http_answers_503_with_the_refusal(failing: Bus) -> None:
    from fastapi.testclient import TestClient

    from bus.surfaces.http.gateway import create_app

    with TestClient(create_app(failing), base_url="http://127.0.0.1") as client:
        got = client.post("/v1/send", json=MSG)
    assert got.status_code == 503
    assert got.json()["error"] == "store_refused" and got.json()["reason"] == "disk"


def test_mcp_send_is_a_tool_error_with_the_refusal(failing: Bus) -> None:
    async def go() -> dict[str, object]:
        async with mcp_client(failing.settings, None) as client:
            result = await call(client, "send", text="hi", handle="hosta:bob")
            assert result.is_error
            assert result.structured_content is not None
            return result.structured_content

    said = anyio.run(go)
    assert said["error"] == "store_refused" and said["reason"] == "disk"
