"""The Claude Code hooks exactly as ``inbox hooks claude --install`` writes them, run the way
Claude Code runs them: ``sh -c '<command>'`` from a bare environment (no venv on PATH, no
INBOX_* variables), the event's JSON on stdin, against a real bus and a real worker whose
INBOX_HOME is not the default."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bus.api import Bus
from bus.core.settings import Settings
from bus.surfaces.harness.hooks import EVENTS
from tests.support.waiting import wait_for
from tests.support.worker_proc import WorkerProcess
from workers.app import make_app
from workers.dispatch import CeleryDispatcher

pytestmark = pytest.mark.slow
INBOX = Path(sys.executable).parent / "inbox"


def test_installed_hooks_run_a_session_from_a_bare_environment(
    settings: Settings, start_worker: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    settings_json = tmp_path / "project" / ".claude" / "settings.json"
    env = settings.child_env()
    for _ in range(2):  # installing twice leaves one group per event
        out = subprocess.run(
            [str(INBOX), "hooks", "claude", "--install", str(settings_json), "--yes"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
    installed = json.loads(settings_json.read_text())["hooks"]
    commands: dict[str, str] = {}
    for event in EVENTS:
        [group] = installed[event]
        entry = group["hooks"][0]  # Stop's second entry is the background waiter
        assert len(group["hooks"]) == (2 if event == "Stop" else 1)
        commands[event] = entry["command"]
        assert f"INBOX_HOME={settings.home}" in entry["command"]
    user_home = tmp_path / "user"
    user_home.mkdir()
    sid = str(uuid.uuid4())
    transcript = tmp_path / "transcript.jsonl"

    def run(event: str, **extra: Any) -> subprocess.CompletedProcess[str]:
        payload = {
            "session_id": sid,
            "transcript_path": str(transcript),
            "cwd": str(tmp_path / "project"),
            "permission_mode": "default",
            "hook_event_name": event,
            **extra,
        }
        done = subprocess.run(
            ["env", "-i", f"HOME={user_home}", "PATH=/usr/bin:/bin", "sh", "-c", commands[event]],
            input=json.dumps(payload),
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path / "project",
        )
        assert done.returncode == 0 and done.stderr == "", (event, done.stderr)
        return done

    start_worker(settings)
    bus = Bus(settings, dispatcher=CeleryDispatcher(make_app(settings)))
    run("SessionStart", source="startup")
    assert bus.session(sid).state == "idle"
    run("UserPromptSubmit", prompt="fix the failing test")
    assert bus.session(sid).state == "running"

    result: dict[str, Any] = {}
    waiter = threading.Thread(
        target=lambda: result.update(
            bus.send({"from": "hostb:lead", "to_id": sid, "text": "status?"}, wait=True, timeout=60)
        )
    )
    waiter.start()
    # The worker builds the notice for the running turn and puts it on the floor.
    wait_for(
        lambda: any(x.get("kind") == "notice" for x in bus.floor.peek(sid)),
        timeout=30,
        what="the notice on the floor",
    )
    tool = run(
        "PostToolUse",
        tool_name="Bash",
        tool_input={"command": "pytest -q"},
        tool_response={"stdout": "1 passed", "stderr": "", "interrupted": False},
    )
    context = json.loads(tool.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "status?" in context and "[inbox" in context
    assert run("PostToolUse", tool_name="Bash").stdout == ""  # nothing new: nothing said

    transcript.write_text(
        json.dumps(
            {"type": "assistant", "message": {"content": [{"type": "text", "text": "green"}]}}
        )
        + "\n"
    )
    run("Stop", stop_hook_active=False)
    waiter.join(60)
    assert result["state"] == "answered" and result["answer"] == "green"
    assert bus.session(sid).state == "idle"
    run("SessionEnd", reason="prompt_input_exit")
    assert bus.session(sid).state == "closed"
