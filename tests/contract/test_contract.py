"""The documented interface is a contract: these commands, options and settings must stay."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from bus.core.settings import Settings
from bus.surfaces.cli.app import app

COMMANDS: list[tuple[list[str], list[str]]] = [
    (["up"], []),
    (["worker"], []),
    (["scheduler"], []),
    (
        ["session", "open"],
        ["--handle", "--host", "--parent", "--wake-cmd", "--workspace", "--starter"],
    ),
    (["session", "close"], []),
    (["turn"], ["--prompt-waiting", "--answer"]),
    (
        ["send"],
        [
            "--to",
            "--to-id",
            "--from",
            "--text",
            "--class",
            "--urgency",
            "--pr",
            "--topic",
            "--thread",
            "--id",
            "--wait",
            "--timeout",
            "--jsonl",
        ],
    ),
    (["deliver"], ["--from", "--text", "--urgency"]),
    (["peek"], ["--stamped"]),
    (["drain"], ["--stamped"]),
    (["listen"], ["--exec"]),
    (["threads"], []),
    (["read"], ["--mark-read"]),
    (["reply"], ["--text"]),
    (["withdraw"], ["--by"]),
    (["request"], ["--to-id", "--type", "--text", "--window"]),
    (["decide"], ["--message", "--window"]),
    (["member", "add"], []),
    (["member", "remove"], []),
    (["item", "post"], ["--title", "--text"]),
    (["item", "settle"], ["--member", "--answer"]),
    (["item", "write"], ["--member", "--text", "--image"]),
    (["read-inbox"], []),
    (["reply-inbox"], ["--text", "--image", "--root"]),
    (["token", "issue"], ["--session", "--member", "--scopes", "--ttl"]),
    (["token", "revoke"], []),
    (["watch"], ["--all"]),
    (["top"], []),
    (["status"], []),
    (["mcp"], []),
    (["serve"], ["--port"]),
    (["flower"], []),
    (["hooks", "claude"], []),
    (["hook", "claude"], []),
    (["hooks", "codex"], ["--install", "--uninstall", "--yes", "--command"]),
    (["hook", "codex"], []),
]


@pytest.mark.parametrize(("command", "options"), COMMANDS, ids=lambda v: " ".join(v))
def test_every_command_and_option_of_the_reference_exists(
    command: list[str], options: list[str]
) -> None:
    result = CliRunner().invoke(app, [*command, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    for option in options:
        assert option in result.output, f"inbox {' '.join(command)} lost {option}"


@pytest.mark.parametrize(
    ("name", "field", "value", "expected"),
    [
        ("INBOX_REDIS_URL", "redis_url", "redis://h:1/0", "redis://h:1/0"),
        ("INBOX_BROKER_URL", "broker_url", "redis://b:1/0", "redis://b:1/0"),
        ("INBOX_HOME", "home", "/tmp/x", "/tmp/x"),
        ("INBOX_HOST", "host", "neo", "neo"),
        ("INBOX_SESSION", "session", "s1", "s1"),
        ("INBOX_AGENT_INBOX", "agent_inbox", "false", False),
        ("INBOX_WAKE_DEBOUNCE_S", "wake_debounce_s", "3", 3.0),
        ("INBOX_FYI_FLUSH_S", "fyi_flush_s", "60", 60.0),
        ("INBOX_RETRY_S", "retry_s", "5", 5.0),
        ("INBOX_SECRET", "secret", "k", "k"),
        ("INBOX_TOKEN", "token", "t", "t"),
        ("INBOX_REDIS_CLUSTER", "redis_cluster", "1", True),
    ],
)
def test_every_setting_of_the_reference_is_read(
    name: str, field: str, value: str, expected: object
) -> None:
    got = getattr(Settings.from_env({name: value}), field)
    assert (str(got) if field == "home" else got) == expected


def test_setting_defaults() -> None:
    s = Settings.from_env({"INBOX_HOME": "/tmp/slab"})
    assert (s.wake_debounce_s, s.fyi_flush_s, s.retry_s) == (2.0, 600.0, 30.0)
    assert s.agent_inbox is True and s.secret is None and str(s.home) == "/tmp/slab"
    assert s.broker_url is None and s.celery_broker_url() == s.store_url().replace(
        "unix://", "redis+socket://"
    )
