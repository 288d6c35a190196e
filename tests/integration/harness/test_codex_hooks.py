"""The Codex hooks' own rules, run in this process as Codex runs them (event JSON in, JSON
out): a session nothing can wake says so at its start, in status and in doctor; the turn's
Stop says what waits on the floor once (bus.surfaces.harness.hooks_codex)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

from bus.api import Bus
from bus.ops.doctor import doctor_report
from bus.surfaces.harness.hooks_codex import run_codex_hook


@pytest.fixture
def sid() -> str:
    return str(uuid.uuid4())  # Codex's session ids are UUIDs


def test_a_session_no_wake_can_reach_says_so_at_its_start_in_status_and_in_doctor(
    bus: Bus, sid: str
) -> None:
    # No Codex process above this one: nothing can wake the session when it is idle.
    code, out = run_codex_hook("SessionStart", {"session_id": sid, "source": "startup"}, bus)
    assert code == 0
    context = json.loads(out)["hookSpecificOutput"]["additionalContext"]
    assert context.startswith("[inbox] Nothing wakes this session while it is idle:")
    info = bus.session(sid)
    assert info.wake_cmd is None and "no Codex process" in (info.wake_problem or "")
    [row] = [r for r in bus.status()["sessions"] if r["session"] == sid]
    assert row["wake_problem"] == info.wake_problem
    report = doctor_report(bus.settings.home, [sid])
    assert [p["check"] for p in report["problems"]] == ["wake_problem"]
    # Its Codex ends: closed, and the note goes with it.
    run_codex_hook("SessionEnd", {"session_id": sid}, bus)
    assert bus.session(sid).state == "closed"
    assert doctor_report(bus.settings.home, [sid])["ok"]


def test_stop_continues_the_turn_with_what_waits_once(bus: Bus, sid: str) -> None:
    run_codex_hook("SessionStart", {"session_id": sid, "source": "startup"}, bus)
    run_codex_hook("UserPromptSubmit", {"session_id": sid, "prompt": "go"}, bus)
    bus.send({"from": "h:lead", "to_id": sid, "class": "blocker", "text": "stop and read"})
    bus.deliver_session(sid)  # the running turn's notice, on the floor
    code, out = run_codex_hook("Stop", {"session_id": sid, "stop_hook_active": False}, bus)
    answer = json.loads(out)
    assert code == 0 and answer["decision"] == "block"
    assert "stop and read" in answer["reason"] and answer["reason"].count("[inbox ·") == 1
    assert bus.session(sid).state == "running"  # the turn goes on
    # What comes during the continuation waits: the second Stop ends the turn.
    bus.send({"from": "h:lead", "to_id": sid, "class": "blocker", "text": "later"})
    bus.deliver_session(sid)
    stop = {"session_id": sid, "stop_hook_active": True, "last_assistant_message": "done"}
    assert run_codex_hook("Stop", stop, bus) == (0, "")
    assert bus.session(sid).state == "idle"
    assert "later" in json.dumps(bus.floor.peek(sid))


def test_the_help_names_codex_home() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bus", "hooks", "codex", "--help"],
        capture_output=True, text=True, timeout=60, env={"COLUMNS": "200", "PATH": "/usr/bin"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "$CODEX_HOME/hooks.json" in text and "~/.codex/hooks.json" not in text
    assert "$CODEX_HOME/config.toml" in text
