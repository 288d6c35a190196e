"""Claude Code hooks (bus/surfaces/harness/hooks.py), fed the JSON Claude Code sends on stdin, on real Redis."""

from __future__ import annotations

import io
import json
import shlex
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from bus.api import Bus
from bus.core.errors import BadInput
from bus.core.hook_env import load_hook_env, redact
from bus.surfaces.harness.hook_install import print_or_install
from bus.surfaces.harness.hook_run import hook_entry
from bus.surfaces.harness.hooks import (
    EVENTS,
    claude_settings,
    hook_command,
    hook_env,
    inbox_program,
    is_own_command,
    run_hook,
)
from tests.support.waiting import wait_for


def payload(sid: str, event: str, **extra: Any) -> dict[str, Any]:
    """What Claude Code writes on a hook's stdin for ``event``."""
    base = {
        "session_id": sid,
        "transcript_path": f"/home/dev/.claude/projects/-work-app/{sid}.jsonl",
        "cwd": "/work/app",
        "permission_mode": "default",
        "hook_event_name": event,
    }
    per_event: dict[str, dict[str, Any]] = {
        "SessionStart": {"source": "startup"},
        "UserPromptSubmit": {"prompt": "fix the failing test"},
        "PostToolUse": {
            "tool_name": "Bash",
            "tool_input": {"command": "pytest -q", "description": "run tests"},
            "tool_response": {"stdout": "1 passed", "stderr": "", "interrupted": False},
        },
        "Stop": {"stop_hook_active": False},
        "SessionEnd": {"reason": "prompt_input_exit"},
    }
    return {**base, **per_event[event], **extra}


def hook(bus: Bus, sid: str, event: str, **extra: Any) -> str:
    code, out = run_hook(event, payload(sid, event, **extra), bus)
    assert code == 0
    return out


@pytest.fixture
def sid() -> str:
    return str(uuid.uuid4())  # Claude Code's session ids are UUIDs


def test_settings_cover_every_event() -> None:
    hooks = claude_settings()
    assert (
        set(hooks)
        == set(EVENTS)
        == {
            "SessionStart",
            "UserPromptSubmit",
            "PostToolUse",
            "Stop",
            "SessionEnd",
        }
    )
    for event, entries in hooks.items():
        for entry in entries:
            assert isinstance(entry["matcher"], str)
            first, *rest = entry["hooks"]
            assert first["type"] == "command"
            assert first["command"] == f"inbox hook claude {event}"
            # Stop also arms the background waiter, which Claude Code runs detached.
            assert [h["command"] for h in rest] == (
                ["inbox hook claude wait"] if event == "Stop" else []
            )
            assert all(h["asyncRewake"] is True for h in rest)
    assert claude_settings("/opt/bin/inbox")["Stop"][0]["hooks"][0]["command"] == (
        "/opt/bin/inbox hook claude Stop"
    )


def test_a_session_through_its_hooks(bus: Bus, sid: str) -> None:
    assert hook(bus, sid, "SessionStart") == ""
    info = bus.session(sid)
    assert info.host == bus.settings.host
    assert info.handle == f"{bus.settings.host}:{sid[:8]}"
    assert info.state == "idle"

    assert hook(bus, sid, "UserPromptSubmit") == ""
    assert bus.session(sid).state == "running"

    # Mid-turn: a message reaches the model at its next tool step, as additionalContext.
    assert bus.send({"from": "hostb:lead", "to_id": sid, "text": "look at the diff"})["ok"]
    bus.deliver_session(sid)
    out = json.loads(hook(bus, sid, "PostToolUse"))
    ctx = out["hookSpecificOutput"]
    assert ctx["hookEventName"] == "PostToolUse"
    assert ctx["additionalContext"].startswith("[inbox")
    assert "look at the diff" in ctx["additionalContext"]
    assert hook(bus, sid, "PostToolUse") == ""  # drained: nothing twice

    assert hook(bus, sid, "Stop") == ""
    assert bus.session(sid).state == "idle"
    assert hook(bus, sid, "SessionEnd") == ""
    assert bus.session(sid).state == "closed"


def test_prompt_submit_prints_the_floor_stamped(bus: Bus, sid: str) -> None:
    hook(bus, sid, "SessionStart")
    hook(bus, sid, "UserPromptSubmit")
    bus.send({"from": "hostb:lead", "to_id": sid, "text": "rebase on main\nthen push"})
    bus.deliver_session(sid)
    hook(bus, sid, "Stop")
    out = hook(bus, sid, "UserPromptSubmit")
    assert out.startswith("[inbox")
    assert "rebase on main" in out
    assert bus.session(sid).state == "running"
    assert hook(bus, sid, "UserPromptSubmit") == ""


def test_a_prompt_that_is_the_notice_is_not_told_it_again(bus: Bus, sid: str) -> None:
    # A wake command's turn: its prompt is the notice it got on stdin, still on the floor.
    hook(bus, sid, "SessionStart")
    hook(bus, sid, "UserPromptSubmit")
    bus.send({"from": "hostb:lead", "to_id": sid, "text": "the schema is blocked"})
    bus.send({"from": "hostb:peer", "to_id": sid, "text": "and lunch"})
    bus.deliver_session(sid)
    hook(bus, sid, "Stop")
    [notice] = [x for x in bus.floor.peek(sid) if x.get("kind") == "notice"]
    prompt = "The inbox has news:\n" + notice["text"]
    assert hook(bus, sid, "UserPromptSubmit", prompt=prompt) == ""
    assert bus.floor.peek(sid) == []  # drained: heard, as with any drain
    assert bus.session(sid).state == "running"


def test_session_start_prints_what_waited(bus: Bus, sid: str) -> None:
    bus.deliver_local(sid, sender="hostb:lead", text="welcome back")
    out = hook(bus, sid, "SessionStart")
    assert "welcome back" in out and out.startswith("[inbox")


def test_redis_down_still_drains(
    make_bus: Callable[..., Bus], sid: str, capsys: pytest.CaptureFixture[str]
) -> None:
    down = make_bus(redis_url="redis://127.0.0.1:1/0")
    down.deliver_local(sid, sender="hostb:lead", text="still here")  # the floor needs no Redis
    capsys.readouterr()
    code = hook_entry(
        "UserPromptSubmit", io.StringIO(json.dumps(payload(sid, "UserPromptSubmit"))), down
    )
    captured = capsys.readouterr()
    assert code == 0
    assert "still here" in captured.out
    assert "turn start failed" in captured.err
    assert down.peek(sid) == []
    for event in ("SessionStart", "Stop", "SessionEnd"):
        assert hook(down, sid, event) == ""


def test_bad_session_id_writes_nothing(
    bus: Bus, prefix: str, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for event in EVENTS:
        for bad in ("../../etc", "", None, "a b"):
            body = json.dumps({**payload("x", event), "session_id": bad})
            assert hook_entry(event, io.StringIO(body), bus) == 0
    assert hook_entry("Stop", io.StringIO("not json"), bus) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "invalid session id" in captured.err
    assert list(bus.settings.home.iterdir()) == []
    assert list(redis.Redis.from_url(redis_url).scan_iter(match=f"{prefix}:*")) == []


def test_print_settings(capsys: pytest.CaptureFixture[str]) -> None:
    assert print_or_install(None, False, inbox_cmd="/opt/inbox", env={}) == 0
    assert json.loads(capsys.readouterr().out) == {"hooks": claude_settings("/opt/inbox")}


def test_the_command_is_this_inbox_with_the_settings_that_find_the_bus() -> None:
    cmd = hook_command(
        "Stop",
        shlex.quote("/opt/my venv/bin/inbox"),
        hook_env({"INBOX_HOME": "~/x y", "HOME": "/h"}),
    )
    home = str(Path("~/x y").expanduser())
    assert shlex.split(cmd) == [
        f"INBOX_HOME={home}",
        "/opt/my venv/bin/inbox",
        "hook",
        "claude",
        "Stop",
    ]
    assert hook_env({"INBOX_SECRET": "s", "INBOX_TOKEN": "t", "INBOX_REDIS_URL": "redis://r"}) == {
        "INBOX_REDIS_URL": "redis://r"
    }
    assert inbox_program().endswith("/inbox")  # the venv's script beside this python
    assert is_own_command(cmd) and is_own_command("inbox hook claude PostToolUse")
    assert not is_own_command("lint.sh") and not is_own_command("inbox hook claude Other")


def test_install_replaces_its_own_entries_keeps_the_users_and_uninstall_removes_them(
    tmp_path: Path,
) -> None:
    path = tmp_path / ".claude" / "settings.json"
    path.parent.mkdir()
    mine = {"matcher": "Bash", "hooks": [{"type": "command", "command": "lint.sh"}]}
    # An earlier install's bare command, grouped with the user's own hook.
    old = {
        "matcher": "*",
        "hooks": [
            {"type": "command", "command": "inbox hook claude PostToolUse"},
            {"type": "command", "command": "notify.sh"},
        ],
    }
    path.write_text(json.dumps({"model": "opus", "hooks": {"PostToolUse": [mine, old]}}))
    original = path.read_text()

    assert print_or_install(path, False, inbox_cmd="/v/inbox", confirm=lambda q: False) == 1
    assert path.read_text() == original

    assert print_or_install(path, True, inbox_cmd="/v/inbox", env={"INBOX_HOME": "/h"}) == 0
    data = json.loads(path.read_text())
    assert data["model"] == "opus"
    post = data["hooks"]["PostToolUse"]
    assert post[0] == mine and post[1]["hooks"] == [{"type": "command", "command": "notify.sh"}]
    for event in EVENTS:
        commands = [h["command"] for e in data["hooks"][event] for h in e["hooks"]]
        assert [c for c in commands if is_own_command(c)] == [
            f"INBOX_HOME=/h /v/inbox hook claude {event}"
        ] + (["INBOX_HOME=/h /v/inbox hook claude wait"] if event == "Stop" else [])
    before = path.read_text()
    assert print_or_install(path, True, inbox_cmd="/v/inbox", env={"INBOX_HOME": "/h"}) == 0
    assert path.read_text() == before  # the same file twice

    assert print_or_install(path, True, inbox_cmd="/v/inbox", uninstall=True) == 0
    assert json.loads(path.read_text()) == {
        "model": "opus",
        "hooks": {"PostToolUse": [mine, {"matcher": "*", "hooks": [old["hooks"][1]]}]},
    }


def test_install_refuses_a_broken_file(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text("{not json")
    with pytest.raises(BadInput):
        print_or_install(path, True)
    assert path.read_text() == "{not json"


def test_install_without_a_terminal_refuses_naming_yes(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = tmp_path / "settings.json"
    out = subprocess.run(
        [sys.executable, "-m", "bus", "hooks", "claude", "--install", str(path)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1 and "--yes" in out.stderr
    assert json.loads(out.stdout)["error"] == "needs_yes"
    assert not path.exists()


def test_the_hook_commands_with_claude_codes_stdin(settings: Any, sid: str) -> None:
    """`inbox hook claude EVENT` run as Claude Code runs it: a subprocess, JSON on stdin."""
    import subprocess
    import sys

    from bus.delivery.dispatch import RecordingDispatcher

    env = settings.child_env()
    env["INBOX_DISPATCHER"] = "none"

    def run(event: str, **extra: Any) -> subprocess.CompletedProcess[str]:
        payload = {
            "session_id": sid,
            "transcript_path": "/tmp/t.jsonl",
            "cwd": "/tmp",
            "hook_event_name": event,
            **extra,
        }
        return subprocess.run(
            [sys.executable, "-m", "bus.surfaces.cli.app", "hook", "claude", event],
            input=json.dumps(payload),
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    assert run("SessionStart", source="startup").returncode == 0
    assert run("UserPromptSubmit", prompt="fix the build").returncode == 0
    b = Bus(settings, dispatcher=RecordingDispatcher())
    assert b.session(sid).state == "running"
    b.send({"from": "hostb:lead", "to_id": sid, "text": "CI is red on main"})
    b.deliver_session(sid)
    out = run(
        "PostToolUse", tool_name="Bash", tool_input={"command": "ls"}, tool_response={"stdout": ""}
    )
    assert out.returncode == 0
    context = json.loads(out.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "CI is red on main" in context
    assert run("Stop", stop_hook_active=False).returncode == 0
    assert b.session(sid).state == "idle"
    assert run("SessionEnd", reason="exit").returncode == 0
    assert b.session(sid).state == "closed"


def test_stop_answers_waiting_senders_with_the_last_assistant_message(
    bus: Bus, sid: str, tmp_path: Path
) -> None:
    import threading

    transcript = tmp_path / "t.jsonl"
    transcript.write_text(
        "\n".join(
            json.dumps(e)
            for e in [
                {"type": "user", "message": {"role": "user", "content": "fix it"}},
                {
                    "type": "assistant",
                    "message": {
                        "content": [
                            {"type": "text", "text": "Done: "},
                            {"type": "tool_use", "name": "Bash"},
                        ]
                    },
                },
                {
                    "type": "assistant",
                    "message": {"content": [{"type": "text", "text": "tests pass"}]},
                },
            ]
        )
        + '\n{"torn'
    )
    hook(bus, sid, "SessionStart")
    hook(bus, sid, "UserPromptSubmit")
    result: dict[str, Any] = {}
    waiter = threading.Thread(
        target=lambda: result.update(
            bus.send({"from": "hostb:lead", "to_id": sid, "text": "status?"}, wait=True, timeout=20)
        )
    )
    waiter.start()
    # The waiter is registered before the message is appended: wait for both, or the
    # delivery below may run before there is anything to deliver.
    wait_for(
        lambda: bus.store.r.scard(bus.store.k.s(sid, "waiters")) and bus.store.queue.backlog(sid),
        what="the waiter and its message stored",
    )
    bus.deliver_session(sid)
    assert "status?" in hook(bus, sid, "PostToolUse")
    code, _ = run_hook(
        "Stop",
        {"session_id": sid, "hook_event_name": "Stop", "transcript_path": str(transcript)},
        bus,
    )
    waiter.join(20)
    assert code == 0 and result["state"] == "answered" and result["answer"] == "tests pass"


def test_a_redis_password_never_goes_into_the_settings_file(tmp_path: Path) -> None:
    path = tmp_path / ".claude" / "settings.json"
    home = tmp_path / "inboxhome"
    env = {
        "INBOX_HOME": str(home),
        "INBOX_REDIS_URL": "redis://:s3cret@10.0.0.5:6379/0",
        "INBOX_BROKER_URL": "redis://10.0.0.5:6379/1?password=s3cret",
        "INBOX_HOST": "hosta",
    }
    assert print_or_install(path, True, inbox_cmd="/v/inbox", env=env) == 0
    written = path.read_text()
    assert "s3cret" not in written and f"INBOX_HOME={home}" in written
    kept = home / "hooks.env.json"
    assert kept.stat().st_mode & 0o777 == 0o600
    assert json.loads(kept.read_text()) == {
        "INBOX_REDIS_URL": env["INBOX_REDIS_URL"],
        "INBOX_BROKER_URL": env["INBOX_BROKER_URL"],
    }
    # The hook finds them again from the bare environment Claude Code gives it.
    bare = {"INBOX_HOME": str(home)}
    assert load_hook_env(bare) == {k: env[k] for k in ("INBOX_REDIS_URL", "INBOX_BROKER_URL")}
    kept.chmod(0o644)  # a file others could have written is not trusted with a password
    assert load_hook_env({"INBOX_HOME": str(home)}) == {}


def test_status_redacts_passwords_in_urls() -> None:
    assert redact("redis://:pw@h:6379/0") == "redis://***@h:6379/0"
    assert redact("redis://u:pw@h/0?db=1&password=pw") == "redis://***@h/0?db=1&password=***"
    assert redact("unix://:pw@/run/redis.sock") == "unix://***@/run/redis.sock"
    assert redact("redis://h:6379/0") == "redis://h:6379/0"


def test_compaction_puts_the_unread_threads_back_blockers_first(bus: Bus, sid: str) -> None:
    hook(bus, sid, "SessionStart")
    bus.send({"from": "hostb:a", "to_id": sid, "text": "just so you know", "class": "fyi"})
    bus.send({"from": "hostb:b", "to_id": sid, "text": "I am blocked on you", "class": "blocker"})
    bus.deliver_session(sid)  # taken into the inbox; the wake waits for its debounce
    for source in ("compact", "resume", "clear"):
        text = hook(bus, sid, "SessionStart", source=source)
        lines = text.splitlines()
        assert lines[0].startswith("[inbox · 2 unread in 2 threads"), source
        assert lines[1].startswith("  ! ") and "I am blocked on you" in lines[1]
        assert "just so you know" in lines[2]
    assert hook(bus, sid, "SessionStart", source="startup") == ""  # nothing new: nothing said
