"""What a new user meets at the command line: the default sender, top without a terminal."""

from __future__ import annotations

import subprocess

import pytest

from bus.api import Bus
from bus.core.models import now_ms
from bus.core.settings import Settings
from tests.support.cli import ENTRY
from tests.support.cli import inbox as run_inbox


@pytest.fixture
def env(settings: Settings) -> dict[str, str]:
    return dict(settings.child_env(), INBOX_DISPATCHER="none")


def inbox(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_inbox(env, *args, module=ENTRY)


def test_inbox_session_is_the_default_sender(env: dict[str, str], bus: Bus) -> None:
    bus.open_session("alice", handle="hosta:alice")
    bus.open_session("bob")
    out = inbox(dict(env, INBOX_SESSION="alice"), "send", "--to-id", "bob", "--text", "hi")
    assert out.returncode == 0, out.stderr
    bus.deliver_session("bob")
    [thread] = bus.threads("bob")["threads"]
    [msg] = bus.read("bob", thread["threadId"])["messages"]
    assert msg["from"] == "hosta:alice" and msg["fromSession"] == "alice"
    # Without INBOX_SESSION: the anonymous sender of local use.
    anon = inbox(env, "send", "--to-id", "bob", "--text", "who?", "--topic", "anon")
    assert anon.returncode == 0, anon.stderr
    bus.deliver_session("bob")
    texts = {
        m["text"]: m["from"]
        for t in bus.threads("bob")["threads"]
        for m in bus.read("bob", t["threadId"])["messages"]
    }
    assert texts["who?"] == "hosta:inbox"


def test_top_without_a_terminal_prints_a_plain_table_once(env: dict[str, str], bus: Bus) -> None:
    bus.open_session("demo")
    bus.store.schedule.beat(bus.settings.host, {"beat": now_ms()})  # its host's worker beats: up
    for args in (["top"], ["top", "--once"]):
        out = inbox(env, *args)
        assert out.returncode == 0, out.stderr
        header, *rows = out.stdout.splitlines()
        assert header.split() == [
            "session", "handle", "host", "state", "turns", "unread", "new", "backlog", "age",
        ]  # fmt: skip
        assert [r.split()[:4] for r in rows] == [["demo", "hosta:demo", "hosta", "idle"]]
        assert "\x1b" not in out.stdout  # no terminal codes in a pipe
