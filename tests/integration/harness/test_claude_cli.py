"""The real Claude Code CLI (npm ``@anthropic-ai/claude-code``) with the hooks exactly as
``inbox hooks claude --install`` wrote them, against a scripted stand-in for its API on
127.0.0.1 (``ANTHROPIC_BASE_URL``), a real worker and a real scheduler."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from bus.api import Bus
from bus.core.errors import NotFound
from bus.core.hook_env import HOOK_ENV
from bus.core.settings import Settings
from tests.support.celery_bus import Scheduler, celery_bus
from tests.support.harness_support import Tmux, bare_env, find_cli, install_hooks, only_session
from tests.support.model_stub import ModelStub, request_text
from tests.support.waiting import wait_for
from tests.support.worker_proc import WorkerProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
KEY = "sk-ant-test-0123456789abcdefghij"
DEBOUNCE_S = 1.0


@dataclass
class Claude:
    bin: Path
    project: Path
    home: Path
    stub: ModelStub
    settings: Settings
    bus: Bus

    def env(self) -> dict[str, str]:
        # DISABLE_AUTOUPDATER: the CLI under test stays the version installed for it (its
        # updater would install a newer one globally, onto the machine's PATH, mid-test).
        return bare_env(
            self.home,
            ANTHROPIC_BASE_URL=self.stub.url,
            ANTHROPIC_API_KEY=KEY,
            DISABLE_AUTOUPDATER="1",
        )


@pytest.fixture
def claude(
    settings: Settings,
    start_worker: Callable[..., WorkerProcess],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[Claude]:
    """Claude Code set up as a person sets it up; parametrized ``deep`` (indirect), its
    INBOX_HOME is deep enough that a session's socket path is over 200 bytes."""
    binary = find_cli("claude")
    s = replace(settings, wake_debounce_s=DEBOUNCE_S, fyi_flush_s=600.0)
    if getattr(request, "param", None) == "deep":
        s = replace(s, home=s.home / ("d" * 100) / ("e" * 60))
    project, home = tmp_path / "project", tmp_path / "user"
    (project / ".claude").mkdir(parents=True)
    home.mkdir()
    # A person's own hook, there before the install: it must stay and keep running.
    own = {"type": "command", "command": f"touch {tmp_path}/own-hook-ran"}
    (project / ".claude" / "settings.json").write_text(
        json.dumps({"hooks": {"UserPromptSubmit": [{"matcher": "", "hooks": [own]}]}})
    )
    (project / ".claude" / "settings.local.json").write_text(
        json.dumps({"permissions": {"allow": ["Bash"]}})
    )
    # What a person answered once: onboarding done, this folder trusted, this key approved.
    (home / ".claude.json").write_text(
        json.dumps(
            {
                "hasCompletedOnboarding": True,
                "theme": "dark",
                "projects": {
                    str(project): {
                        "hasTrustDialogAccepted": True,
                        "hasCompletedProjectOnboarding": True,
                    }
                },
                "customApiKeyResponses": {"approved": [KEY[-20:]], "rejected": []},
            }
        )
    )
    for _ in range(2):  # installing twice leaves one entry per event
        install_hooks("claude", project / ".claude" / "settings.json", s)
    start_worker(s)
    scheduler = Scheduler(s)
    with ModelStub() as stub:
        try:
            yield Claude(binary, project, home, stub, s, celery_bus(s))
        finally:
            scheduler.stop()


def _has(text: str) -> Callable[[dict[str, Any]], bool]:
    return lambda body: text in request_text(body)


def test_the_install_leaves_one_entry_per_event_and_the_persons_own_hook(claude: Claude) -> None:
    hooks = json.loads((claude.project / ".claude" / "settings.json").read_text())["hooks"]
    own = [
        h for g in hooks["UserPromptSubmit"] for h in g["hooks"] if "own-hook-ran" in h["command"]
    ]
    assert len(own) == 1
    for event in ("SessionStart", "UserPromptSubmit", "PostToolUse", "Stop", "SessionEnd"):
        ours = [
            h for g in hooks[event] for h in g["hooks"] if f"hook claude {event}" in h["command"]
        ]
        assert len(ours) == 1, event
    [waiter] = [
        h for g in hooks["Stop"] for h in g["hooks"] if h["command"].endswith("claude wait")
    ]
    assert waiter["asyncRewake"] is True
    done = subprocess.run(
        [str(claude.bin), "--version"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


def test_headless_turn_hears_a_mid_turn_notice_and_answers_the_waited_send(
    claude: Claude, tmp_path: Path
) -> None:
    # A short path: the notice previews 120 characters and the stub runs what it shows.
    go = Path(tempfile.mkdtemp(prefix="go-")) / "go"
    prompt = f"please run: until [ -e {go} ]; do sleep 0.05; done; echo tool-finished"
    proc = subprocess.Popen(
        [str(claude.bin), "-p", prompt, "--output-format", "json"],
        cwd=claude.project,
        env=claude.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        bus = claude.bus
        sid = only_session(bus)
        # The tool is running: the model asked for it.
        claude.stub.wait_for(_has("please run: until"), 60, "the turn's first request")
        wait_for(lambda: bus.session(sid).state == "running", 30, what="the turn started")
        result: dict[str, Any] = {}
        waited = threading.Thread(
            target=lambda: result.update(
                bus.send(
                    {"from": "hostb:lead", "to_id": sid, "text": "status? (waited)"},
                    wait=True,
                    timeout=120,
                )
            )
        )
        waited.start()
        bus.send({"from": "hostb:peer", "to_id": sid, "text": "the build is red", "class": "fyi"})
        wait_for(
            lambda: sum(len(x["notice"]["messages"]) for x in bus.floor.peek(sid)
                        if x.get("kind") == "notice") == 2,
            30,
            what="both messages in notices on the floor",
        )  # fmt: skip
        go.touch()
        after_tool = claude.stub.wait_for(_is_result, 60, "the tool result's request")
        text = request_text(after_tool)
        assert text.count("[inbox ·") == 1 and "2 new in 2 threads" in text
        assert "status? (waited)" in text and "the build is red" in text
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert json.loads(out)["result"] == "done"
        waited.join(120)
        assert result["state"] == "answered" and result["answer"] == "done"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)


def test_idle_interactive_session_wakes_for_a_blocker_not_an_fyi(
    claude: Claude, tmp_path: Path
) -> None:
    bus, stub = claude.bus, claude.stub
    tmux = Tmux([str(claude.bin)], claude.project, claude.env())
    try:
        tmux.wait_screen(lambda s: "❯" in s, 120, "the prompt")
        sid = only_session(bus)
        tmux.type("please run: echo first-turn")
        stub.wait_for(lambda b: "first-turn" in request_text(b) and _is_result(b), 60, "turn 1")
        assert (tmp_path / "own-hook-ran").exists()  # the person's hook still runs
        sock = bus.floor.session_dir(sid) / "inbox.sock"
        wait_for(
            lambda: bus.session(sid).state == "idle" and sock.exists(),
            30,
            what="the turn's end and the waiter listening",
        )
        seen = len(stub.main_requests())

        # An FYI does not wake it: the plan is the flush, ten minutes on.
        bus.send({"from": "hostb:peer", "to_id": sid, "text": "fyi: lunch", "class": "fyi"})
        due = f"due|{sid}"
        wait_for(
            lambda: (bus.store.r.zscore(bus.store.k.due, due) or 0) > time.time() * 1000 + 60_000,
            30,
            what="the FYI's flush planned",
        )
        with pytest.raises(AssertionError):
            stub.wait_for(lambda b: "fyi: lunch" in request_text(b), DEBOUNCE_S + 2, "no wake")
        assert len(stub.main_requests()) == seen and sock.exists()

        # A blocker does, within the debounce and a few seconds, with the notice.
        # A short path: the notice previews 120 characters and the stub runs what it shows.
        go = Path(tempfile.mkdtemp(prefix="go-")) / "go"
        sent = time.monotonic()
        bus.send(
            {
                "from": "hostb:lead",
                "to_id": sid,
                "class": "blocker",
                "text": f"please run: until [ -e {go} ]; do sleep 0.05; done; echo woken-tool",
            }
        )
        woken = stub.wait_for(_has("woke this idle session"), DEBOUNCE_S + 15, "the woken turn")
        assert time.monotonic() - sent < DEBOUNCE_S + 15
        text = request_text(woken)
        assert "[inbox · 2 new in 2 threads" in text and "fyi: lunch" in text
        # A second blocker during that turn goes in at its next tool step.
        _steered_in_the_woken_turn(claude, sid, go, "woken-tool", "second blocker")

    finally:
        tmux.close()


def test_a_compacted_session_hears_its_unread_thread_again(claude: Claude) -> None:
    bus, stub = claude.bus, claude.stub
    tmux = Tmux([str(claude.bin)], claude.project, claude.env())
    try:
        tmux.wait_screen(lambda s: "❯" in s, 120, "the prompt")
        sid = only_session(bus)
        tmux.type("please run: echo first-turn")
        stub.wait_for(lambda b: "first-turn" in request_text(b) and _is_result(b), 60, "turn 1")
        wait_for(lambda: bus.session(sid).state == "idle", 30, what="the turn's end")
        # Unread and never said: an FYI waits for its flush, ten minutes on.
        bus.send({"from": "hostb:peer", "to_id": sid, "text": "fyi: still unread", "class": "fyi"})
        tmux.type("/compact")
        stub.wait_for(lambda b: "summar" in request_text(b).lower(), 90, "the summary request")
        # Claude Code's own line once it compacted (the typed "/compact" and its menu entry
        # are on the screen before that, so "compact" alone matches too early).
        tmux.wait_screen(lambda s: "Conversation compacted" in s, 90, "the compaction")
        tmux.type("please say hi")
        after = stub.wait_for(
            lambda b: "please say hi" in request_text(b), 60, "the first request after it"
        )
        assert "unread in" in request_text(after) and "fyi: still unread" in request_text(after)
    finally:
        tmux.close()


@pytest.mark.parametrize("claude", ["deep"], indirect=True)
def test_a_session_whose_socket_path_is_over_200_bytes_is_woken_and_hears_mid_turn(
    claude: Claude,
) -> None:
    bus, stub = claude.bus, claude.stub
    tmux = Tmux([str(claude.bin)], claude.project, claude.env())
    try:
        tmux.wait_screen(lambda s: "❯" in s, 120, "the prompt")
        sid = only_session(bus)
        sock = bus.floor.socket_path(sid)
        assert len(str(sock).encode()) > 200
        tmux.type("please run: echo first-turn")
        first = stub.wait_for(lambda b: "first-turn" in request_text(b), 60, "turn 1")
        assert "cannot be woken" not in request_text(first)  # SessionStart found no problem
        wait_for(
            lambda: bus.session(sid).state == "idle" and sock.exists(),
            30,
            what="the turn's end and the waiter listening through its short link",
        )
        go = Path(tempfile.mkdtemp(prefix="go-")) / "go"
        sent = time.monotonic()
        bus.send(
            {
                "from": "hostb:lead",
                "to_id": sid,
                "class": "blocker",
                "text": f"please run: until [ -e {go} ]; do sleep 0.05; done; echo deep-tool",
            }
        )
        stub.wait_for(_has("woke this idle session"), DEBOUNCE_S + 15, "the woken turn")
        assert time.monotonic() - sent < DEBOUNCE_S + 15
        _steered_in_the_woken_turn(claude, sid, go, "deep-tool", "mid-turn")
    finally:
        tmux.close()


def _steered_in_the_woken_turn(claude: Claude, sid: str, go: Path, tool: str, steer: str) -> None:
    """In the turn a blocker woke (its tool waiting on ``go``), a blocker ``steer`` goes in
    at the tool's result; then the session is idle again with its waiter listening."""
    bus, stub = claude.bus, claude.stub
    wait_for(lambda: bus.session(sid).state == "running", 30, what="the woken turn running")
    bus.send({"from": "hostb:lead", "to_id": sid, "class": "blocker", "text": steer})
    wait_for(
        lambda: any(steer in x.get("text", "") for x in bus.floor.peek(sid)),
        30,
        what="the steer on the floor",
    )
    go.touch()
    step = stub.wait_for(
        lambda b: _is_result(b) and tool in json.dumps(b["messages"][-3:]),
        60,
        "the woken turn's tool result",
    )
    assert steer in request_text(step)
    sock = bus.floor.socket_path(sid)
    wait_for(lambda: sock.exists() and bus.session(sid).state == "idle", 60, what="re-armed")


def _is_result(body: dict[str, Any]) -> bool:
    users = [m for m in body.get("messages", []) if m.get("role") == "user"]
    content = users[-1].get("content") if users else None
    return isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content
    )


def test_a_model_turn_sends_through_the_inbox_mcp_server_as_its_session(
    claude: Claude,
) -> None:
    # The MCP server added as docs/harnesses.md says, with the settings the hooks carry;
    # no INBOX_SESSION anywhere: the SessionStart hook recorded the session for it.
    inbox = Path(sys.executable).parent / "inbox"
    settings = [f"{k}={v}" for k, v in claude.settings.child_env().items() if k in HOOK_ENV]
    added = subprocess.run(
        [str(claude.bin), "mcp", "add", "--scope", "user", "inbox",
         *(a for kv in settings for a in ("-e", kv)), "--", str(inbox), "mcp"],
        cwd=claude.project, env=claude.env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr + added.stdout
    local = claude.project / ".claude" / "settings.local.json"
    local.write_text(json.dumps({"permissions": {"allow": ["Bash", "mcp__inbox"]}}))
    bus = claude.bus
    bus.open_session("peer", handle="hosta:peer")
    call = json.dumps({"to_id": "peer", "text": "sent over mcp"})
    done = subprocess.run(
        [str(claude.bin), "-p", f"please call: mcp__inbox__send {call}", "--output-format", "json"],
        cwd=claude.project, env=claude.env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr + done.stdout
    [sid] = [s for s in bus.store.sessions.session_ids() if s != "peer"]
    result = claude.stub.wait_for(_is_result, 60, "the tool result's request")
    [answer] = [
        b for m in result["messages"] if isinstance(m.get("content"), list)
        for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result"
    ]  # fmt: skip
    assert not answer.get("is_error"), answer
    content = answer["content"]
    text = content if isinstance(content, str) else "".join(b.get("text", "") for b in content)
    sent = json.loads(text)
    assert sent["ok"] is True and sent["recipient"]["session"] == "peer"
    # It went out from Claude Code's own session: in that session's outbox, under its
    # handle, and arrived in the peer's thread.
    [mine] = [m for m in bus.sent(sid)["sent"] if m["id"] == sent["id"]]
    assert mine["to"] == "peer"

    def arrived_in_thread() -> list[dict[str, Any]]:
        try:
            thread = bus.read("peer", sent["thread"])["messages"]
        except NotFound:  # the worker has not delivered it yet
            return []
        return [m for m in thread if m["id"] == sent["id"]]

    [arrived] = wait_for(arrived_in_thread, 60, what="the message in the peer thread")  # type: ignore[misc]
    assert arrived["text"] == "sent over mcp"
    assert arrived["from"] == bus.session(sid).handle
