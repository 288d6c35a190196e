"""The doctor's reach rules (pure): which configured MCP servers are ``inbox mcp``, where
the harnesses keep them, and the rows a probe's finding becomes."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import pytest

from bus.ops.doctor_reach import SERVED, UI_URL, Probe, gateway_rows, mcp_rows, probe_gateway
from bus.ops.mcp_configs import McpEntry, inbox_mcp_entries, is_inbox_mcp
from bus.ops.serve_record import url_of


@pytest.mark.parametrize(
    ("command", "args", "ours"),
    [
        ("/home/u/.local/bin/inbox", ("mcp",), True),
        ("inbox", ("mcp",), True),
        ("/usr/bin/python3", ("-m", "bus", "mcp"), True),
        ("python", ("-m", "bus.surfaces.cli.app", "mcp"), True),
        ("inbox", ("serve",), False),
        ("inbox", (), False),
        ("npx", ("-y", "some-mcp"), False),
        ("python", ("-m", "other", "mcp"), False),
        ("python", ("-m",), False),
        ("/opt/inboxer", ("mcp",), False),
    ],
)
def test_which_servers_are_inbox_mcp(command: str, args: tuple[str, ...], ours: bool) -> None:
    assert is_inbox_mcp(command, args) is ours


def test_the_configs_each_harness_keeps(tmp_path: Path) -> None:
    user, project = tmp_path / "user", tmp_path / "project"
    (user / ".codex").mkdir(parents=True)
    project.mkdir()
    inbox = {"command": "/bin/inbox", "args": ["mcp"]}
    (user / ".claude.json").write_text(
        json.dumps(
            {
                "mcpServers": {"inbox": inbox, "other": {"command": "npx", "args": ["x"]}},
                "projects": {str(project): {"mcpServers": {"here": {**inbox, "env": {"A": "1"}}}}},
            }
        )
    )
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": {"same": inbox}}))
    (user / ".codex" / "config.toml").write_text(
        '[mcp_servers.inbox]\ncommand = "/bin/inbox"\nargs = ["mcp"]\nenv = { B = "2" }\n'
    )
    found = inbox_mcp_entries({"HOME": str(user)}, project)
    assert [(e.harness, e.name, dict(e.env)) for e in found] == [
        ("claude", "inbox", {}),  # the user's; .mcp.json's same server is not asked twice
        ("claude", "here", {"A": "1"}),
        ("codex", "inbox", {"B": "2"}),
    ]
    assert inbox_mcp_entries({"HOME": str(tmp_path / "nobody")}, tmp_path) == []


def test_unreadable_configs_are_none(tmp_path: Path) -> None:
    (tmp_path / ".claude.json").write_text("{not json")
    (tmp_path / ".codex").mkdir()
    (tmp_path / ".codex" / "config.toml").write_text("= nope")
    assert inbox_mcp_entries({"HOME": str(tmp_path)}, tmp_path) == []


URL = "http://127.0.0.1:5252"
ENTRY = McpEntry("codex", "/u/.codex/config.toml", "inbox", "/bin/inbox", ("mcp",))


@pytest.mark.parametrize(
    ("source", "probe", "reason", "fix"),
    [
        (UI_URL, Probe("ok"), None, None),
        (UI_URL, Probe("unreachable", "connection refused"),
         f"the HTTP gateway at {URL} (INBOX_UI_URL) does not answer: connection refused",
         "inbox serve` where INBOX_UI_URL points"),
        (SERVED, Probe("unreachable", "connection refused"),
         f"the gateway `inbox serve` runs for this home at {URL} (serve.json) does not answer",
         "remove that file if this home runs no gateway now"),
        (UI_URL, Probe("not_gateway", "GET /health answered 404"),
         "is not the inbox's gateway", "point INBOX_UI_URL"),
        (SERVED, Probe("no_store"), "cannot reach its store", "inbox up"),
        (UI_URL, Probe("token_refused", "token has expired", "token_expired"),
         "refuses INBOX_TOKEN (token_expired: token has expired)", "inbox token issue"),
    ],
)  # fmt: skip
def test_gateway_rows(source: str, probe: Probe, reason: str | None, fix: str | None) -> None:
    rows = gateway_rows(URL, source, probe)
    if reason is None:
        assert rows == []
        return
    [row] = rows
    assert (row["check"], row["url"], row["source"]) == ("gateway", URL, source)
    assert reason in row["reason"] and fix in row["fix"]


@pytest.mark.parametrize(
    ("host", "port", "url"),
    [
        ("127.0.0.1", 5252, "http://127.0.0.1:5252"),
        ("0.0.0.0", 80, "http://127.0.0.1:80"),
        ("::", 5252, "http://[::1]:5252"),
        ("10.0.0.5", 5252, "http://10.0.0.5:5252"),
    ],
)
def test_where_a_gateway_is_dialled(host: str, port: int, url: str) -> None:
    assert url_of(host, port) == url


@pytest.mark.parametrize(
    ("probe", "reason", "fix"),
    [
        (Probe("ok"), None, None),
        (Probe("unreachable", "/bin/inbox is not there"), "cannot be started: /bin/inbox",
         'codex mcp add inbox -- "$(command -v inbox)" mcp'),
        (Probe("no_store", "Redis did not answer"), "cannot reach its store", "INBOX_REDIS_URL"),
        (Probe("token_refused", "token has been revoked", "token_revoked"),
         "refuses its token (token_revoked", "INBOX_TOKEN in the server's env"),
    ],
)  # fmt: skip
def test_mcp_rows(probe: Probe, reason: str | None, fix: str | None) -> None:
    rows = mcp_rows(ENTRY, probe)
    if reason is None:
        assert rows == []
        return
    [row] = rows
    assert (row["check"], row["harness"], row["server"]) == ("mcp", "codex", "inbox")
    assert row["command"] == "/bin/inbox mcp"
    assert reason in row["reason"] and fix in row["fix"]


def test_a_listener_that_speaks_no_http_is_not_the_gateway() -> None:
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()

        def answer() -> None:
            conn, _ = srv.accept()
            with conn:
                conn.recv(1024)
                conn.sendall(b"-ERR unknown command\r\n")  # a Redis, say

        thread = threading.Thread(target=answer, daemon=True)
        thread.start()
        probe = probe_gateway(f"http://127.0.0.1:{srv.getsockname()[1]}", None, timeout_s=10)
        thread.join(10)
    assert probe.state == "not_gateway" and "does not answer HTTP" in probe.said
