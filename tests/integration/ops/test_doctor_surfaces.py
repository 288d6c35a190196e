"""``inbox doctor`` on the surfaces run beside the bus: a real gateway on a loopback port
(INBOX_UI_URL) and a real ``inbox mcp`` started from a harness's config, each found
answering, not answering, or refusing its token, with the fix in words."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bus.api import Bus
from bus.trust.tokens import SCOPE_READ, SCOPE_THREAD, SCOPE_WRITE, issue
from tests.support.gateway_server import Server

SECRET = "doctor-secret-0123456789"
OTHER = "another-secret-987654321"
SCOPES = (SCOPE_READ, SCOPE_WRITE, SCOPE_THREAD)
MCP = {"command": sys.executable, "args": ["-m", "bus", "mcp"]}


def doctor(
    b: Bus, user: Path, env: dict[str, str]
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """``inbox doctor`` with ``user`` as the harnesses' home: its run and its rows about
    the gateway and MCP servers (each one it asked is in ``surfaces``)."""
    full = b.settings.child_env()
    for name in ("CODEX_HOME", "CLAUDE_CONFIG_DIR"):
        full.pop(name, None)
    full.update({"HOME": str(user), "INBOX_DISPATCHER": "none", **env})
    out = subprocess.run(
        [sys.executable, "-m", "bus", "doctor"],
        env=full,
        cwd=str(user),
        capture_output=True,
        text=True,
        timeout=120,
    )
    said = json.loads(out.stdout)
    rows = [p for p in said["problems"] if p["check"] in ("gateway", "mcp")]
    failed = {s["check"] for s in said["surfaces"] if not s["ok"]}
    assert failed == {p["check"] for p in rows}  # a row for each one asked that failed
    return out, rows


def claude_config(user: Path, **env: str) -> None:
    user.mkdir(exist_ok=True)
    entry = {"type": "stdio", **MCP, "env": env}
    (user / ".claude.json").write_text(json.dumps({"mcpServers": {"inbox": entry}}))


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_gateway_and_an_mcp_server_that_answer_are_no_problem(
    bus: Bus, serve: Callable[..., Server], tmp_path: Path
) -> None:
    gateway = serve(bus)
    claude_config(tmp_path / "user")
    out, rows = doctor(bus, tmp_path / "user", {"INBOX_UI_URL": gateway.url})
    assert rows == [], out.stderr
    asked = json.loads(out.stdout)["surfaces"]
    assert asked == [
        {"check": "gateway", "url": gateway.url, "source": "INBOX_UI_URL", "ok": True},
        {"check": "mcp", "config": str(tmp_path / "user" / ".claude.json"), "server": "inbox",
         "ok": True},
    ]  # fmt: skip


def test_a_gateway_that_does_not_answer_and_an_mcp_server_not_there(
    bus: Bus, tmp_path: Path
) -> None:
    user = tmp_path / "user"
    (user / ".codex").mkdir(parents=True)
    (user / ".codex" / "config.toml").write_text(
        '[mcp_servers.inbox]\ncommand = "/nowhere/inbox"\nargs = ["mcp"]\n'
    )
    url = f"http://127.0.0.1:{closed_port()}"
    out, rows = doctor(bus, user, {"INBOX_UI_URL": url})
    assert out.returncode == 1, out.stdout + out.stderr
    by = {row["check"]: row for row in rows}
    assert set(by) == {"gateway", "mcp"}
    assert by["gateway"]["url"] == url and "does not answer" in by["gateway"]["reason"]
    assert "inbox serve" in by["gateway"]["fix"]
    assert by["mcp"]["harness"] == "codex" and "/nowhere/inbox" in by["mcp"]["reason"]
    assert "codex mcp add" in by["mcp"]["fix"]
    line = out.stderr.splitlines()[-1]  # the refusal's (a note on the server may precede)
    assert line.startswith("inbox: ")
    assert f"the HTTP gateway at {url} (INBOX_UI_URL) does not answer" in line
    assert "codex mcp add inbox" in line


def test_a_token_the_gateway_and_the_mcp_server_refuse(
    make_bus: Callable[..., Bus], serve: Callable[..., Server], tmp_path: Path
) -> None:
    b = make_bus(secret=SECRET)
    b.open_session("alice")
    gateway = serve(b)
    forged = issue(OTHER, session="alice", scopes=SCOPES)  # signed with another secret
    good = issue(SECRET, session="alice", scopes=SCOPES)
    user = tmp_path / "user"
    env = {"INBOX_UI_URL": gateway.url, "INBOX_SECRET": SECRET}

    claude_config(user, INBOX_TOKEN=forged)
    out, rows = doctor(b, user, {**env, "INBOX_TOKEN": forged})
    assert out.returncode == 1, out.stdout + out.stderr
    by = {row["check"]: row for row in rows}
    assert by["gateway"]["error"] == "token_bad_signature"
    assert "refuses INBOX_TOKEN" in by["gateway"]["reason"]
    assert by["mcp"]["error"] == "token_bad_signature"
    assert "refuses its token" in by["mcp"]["reason"] and "inbox token issue" in by["mcp"]["fix"]

    claude_config(user, INBOX_TOKEN=good)
    out, rows = doctor(b, user, {**env, "INBOX_TOKEN": good})
    assert rows == [], out.stderr
    assert [s["ok"] for s in json.loads(out.stdout)["surfaces"]] == [True, True]


def start_serve(b: Bus, port: int) -> subprocess.Popen[bytes]:
    """A real ``inbox serve`` of ``b``'s home, answering ``/health`` (bounded wait)."""
    env = {**b.settings.child_env(), "INBOX_DISPATCHER": "none"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "bus", "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None and time.monotonic() < deadline, "inbox serve did not start"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc
        except OSError:
            time.sleep(0.1)  # a port that does not listen yet has no event to wait on


def test_the_gateway_this_home_serves_is_asked_and_a_killed_one_said(
    bus: Bus, tmp_path: Path
) -> None:
    user, port = tmp_path / "user", closed_port()
    user.mkdir()
    url = f"http://127.0.0.1:{port}"
    record = bus.settings.home / "serve.json"
    served = start_serve(bus, port)
    try:
        assert json.loads(record.read_text())["url"] == url
        out, rows = doctor(bus, user, {})
        assert rows == [], out.stderr
        asked = json.loads(out.stdout)["surfaces"]
        assert asked == [{"check": "gateway", "url": url, "source": "serve.json", "ok": True}]
    finally:
        served.send_signal(signal.SIGTERM)
        served.wait(30)
    assert not record.exists()  # a gateway stopped takes its record away: nothing to ask
    out, rows = doctor(bus, user, {})
    assert rows == [] and json.loads(out.stdout)["surfaces"] == []

    killed = start_serve(bus, port)
    killed.kill()
    killed.wait(30)
    out, [row] = doctor(bus, user, {})
    assert out.returncode == 1
    assert row["source"] == "serve.json" and "does not answer" in row["reason"]
    assert "inbox serve" in row["fix"] and "serve.json" in row["fix"]
