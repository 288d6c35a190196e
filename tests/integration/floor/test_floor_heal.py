"""The floor heals or speaks: a torn tail does not swallow the next notice, a drain says
what it skipped, the doctor lists it, and the floor fsyncs by the durability level."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bus.api import Bus
from bus.core.settings import Settings
from bus.delivery import floor as floor_mod
from bus.delivery.floor import Floor
from bus.delivery.floor_result import floor_sync

SID = "torn-1"
FRAGMENT = b'{"v":1,"id":"half","ts":1,"from":"h:x","to_id":"torn-1","te'


def inbox(settings: Settings, module: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**settings.child_env(), "INBOX_DISPATCHER": "none"}
    return subprocess.run(
        [sys.executable, "-m", module, *args], env=env, capture_output=True, text=True, timeout=60
    )


def torn_notice(bus: Bus) -> str:
    """A running session whose floor ends in a harness's torn write, then a notice."""
    bus.open_session(SID)
    bus.turn(SID, "start")
    d = bus.floor.prepare(SID)
    with open(d / "messages.jsonl", "ab") as f:
        f.write(FRAGMENT)  # died mid-write: no newline
    sent = bus.send({"from": "hosta:peer", "to_id": SID, "text": "after the tear"})["id"]
    bus.deliver_session(SID)
    return str(sent)


def carried(lines: list[dict[str, Any]]) -> list[str]:
    return [m for x in lines if x.get("kind") == "notice" for m in x["notice"]["messages"]]


# "bus": the command's fast lane (something waits on the floor); the other, the full CLI.
@pytest.mark.parametrize("module", ["bus", "bus.surfaces.cli.app"])
def test_a_notice_after_a_torn_tail_is_drained_and_the_skipped_line_is_said(
    bus: Bus, settings: Settings, module: str
) -> None:
    sent = torn_notice(bus)
    out = inbox(settings, module, "drain", SID)
    assert out.returncode == 0, out.stderr
    lines = json.loads(out.stdout)
    assert carried(lines) == [sent]
    kept = str(bus.floor.malformed_path(SID))
    assert lines[-1] == {"kind": "malformed", "count": 1, "kept": kept}
    assert "1 unreadable line(s) skipped, kept in " + kept in out.stderr
    assert [json.loads(x)["raw"] for x in Path(kept).read_text().splitlines()] == [
        FRAGMENT.decode()
    ]
    record = bus.store.r.hget(bus.store.k.s(SID, "msgs"), sent)
    assert json.loads(record)["mark"] == "noticed"


def test_the_stamped_drain_tells_the_model_of_the_skipped_line(
    bus: Bus, settings: Settings
) -> None:
    torn_notice(bus)
    out = inbox(settings, "bus", "drain", SID, "--stamped")
    assert out.returncode == 0, out.stderr
    assert "[inbox · 1 new in 1 thread" in out.stdout
    assert "[inbox · 1 unreadable line skipped on the floor, kept in " in out.stdout


def test_doctor_lists_the_lines_kept_aside_and_exits_1(bus: Bus, settings: Settings) -> None:
    torn_notice(bus)
    bus.drain(SID)
    out = inbox(settings, "bus.surfaces.cli.app", "doctor")
    assert out.returncode == 1
    answer = json.loads(out.stdout)
    assert answer["ok"] is False and answer["error"] == "malformed_lines"
    # Only the floor's row: other checks (a host no worker serves here) may list more.
    [problem] = [p for p in answer["problems"] if p["check"] == "malformed"]
    assert problem["session"] == SID and problem["check"] == "malformed"
    assert problem["count"] == 1 and problem["newest"] == [FRAGMENT.decode()]
    assert problem["kept"] == str(bus.floor.malformed_path(SID))
    assert "remove the file" in problem["fix"]
    assert "inbox: 1 session(s) have unreadable floor lines kept aside" in out.stderr
    os.unlink(problem["kept"])  # read and removed, as the fix says: well again
    again = json.loads(inbox(settings, "bus.surfaces.cli.app", "doctor").stdout)
    assert [p for p in again.get("problems", []) if p["check"] == "malformed"] == []


def test_concurrent_appends_after_a_torn_tail_lose_no_line(tmp_path: Path) -> None:
    fl = Floor(tmp_path)
    d = fl.prepare(SID)
    (d / "messages.jsonl").write_bytes(FRAGMENT)
    for i in range(20):
        fl.append(SID, {"id": f"m{i}", "from": "h:x", "text": "x"})
    r = fl.drain(SID)
    assert [x["id"] for x in r.lines] == [f"m{i}" for i in range(20)]
    assert r.malformed == [FRAGMENT.decode()]


@pytest.mark.parametrize(
    ("durability", "synced"),
    [("memory", False), ("disk", True), ("replica", True)],
)
def test_the_floor_fsyncs_unless_durability_is_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durability: str, synced: bool
) -> None:
    settings = Settings.from_env({"INBOX_HOME": str(tmp_path), "INBOX_DURABILITY": durability})
    assert floor_sync(settings) is synced
    calls: list[int] = []
    real = os.fdatasync
    monkeypatch.setattr(floor_mod.os, "fdatasync", lambda fd: (calls.append(fd), real(fd))[1])
    fl = Floor(tmp_path, fsync=floor_sync(settings))
    fl.append(SID, {"id": "m1", "from": "h:x", "text": "x"})
    assert bool(calls) is synced  # the append
    fl.drain(SID)
    assert len(calls) == (2 if synced else 0)  # and the log
