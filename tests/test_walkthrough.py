"""The README's walkthroughs, run as a user runs them (subprocess CLI, real Redis)."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from bus.settings import Settings
from tests.conftest import settings_env


@pytest.fixture
def inbox(settings: Settings):  # type: ignore[no-untyped-def]
    env = settings_env(settings)
    env["INBOX_DISPATCHER"] = "none"
    env["INBOX_HOST"] = "neo"

    def run(*args: str, session: str | None = None, code: int = 0) -> dict:  # type: ignore[type-arg]
        e = dict(env, **({"INBOX_SESSION": session} if session else {}))
        out = subprocess.run(
            [sys.executable, "-m", "bus.cli", *args],
            env=e,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == code, (args, out.stdout, out.stderr)
        return json.loads(out.stdout.splitlines()[0]) if out.stdout.strip() else {}

    return run


def tiny_png() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00"))
        + chunk(b"IEND", b"")
    )


def test_a_meeting_request_negotiated_to_confirmed(inbox) -> None:  # type: ignore[no-untyped-def]
    inbox("session", "open", "alice")
    inbox("session", "open", "bob")
    req = inbox(
        "request",
        "--to-id",
        "bob",
        "--type",
        "meeting_request",
        "--text",
        "sync on the release?",
        "--window",
        "2026-12-01T10:00/2026-12-01T10:30",
        session="alice",
    )
    assert req["state"] == "REQUESTED"
    thread = req["thread"]
    counter = inbox(
        "decide",
        thread,
        "counter",
        "--message",
        "later?",
        "--window",
        "2026-12-01T15:00/2026-12-01T15:30",
        "--window",
        "2026-12-02T09:00/2026-12-02T09:30",
        session="bob",
    )
    assert counter["new_state"] == "OFFERED"
    own = inbox("decide", thread, "accept", session="bob", code=1)
    assert own == {
        "ok": False,
        "error": "invalid_for_state",
        "state": "OFFERED",
        "message": own["message"],
    }
    done = inbox("decide", thread, "accept", "--message", "15:00 works", session="alice")
    assert done["new_state"] == "CONFIRMED"
    late = inbox("decide", thread, "decline", session="bob", code=1)
    assert late["error"] == "thread_terminal"
    inbox("session", "open", "carol")
    outsider = inbox("decide", thread, "accept", session="carol", code=1)
    assert outsider["error"] == "not_a_party"
    assert inbox("read", "alice", thread)["state"] == "CONFIRMED"


def test_an_item_answered_with_a_picture(inbox, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    (sandbox / "shot.png").write_bytes(tiny_png())
    (sandbox / "notes.png").write_text("not a picture")
    inbox("member", "add", "acme", "dean")
    inbox("session", "open", "coder", "--workspace", "acme", "--starter", "dean")
    inbox("item", "post", "coder", "deploy", "--title", "Deploy to prod?")
    inbox(
        "item",
        "write",
        "coder",
        "deploy",
        "--member",
        "dean",
        "--text",
        "What does the dashboard look like?",
    )
    reply = inbox(
        "reply-inbox",
        "coder",
        "deploy",
        "--text",
        "Here it is.",
        "--image",
        "shot.png",
        "--root",
        str(sandbox),
    )
    assert reply["files"] == ["shot.png"]
    refused = inbox(
        "reply-inbox", "coder", "deploy", "--image", "notes.png", "--root", str(sandbox), code=2
    )
    assert refused["error"] == "not_a_picture"
    inbox("item", "settle", "coder", "deploy", "--member", "dean", "--answer", "yes")
    [item] = inbox("read-inbox", "coder")["items"]
    assert item["status"] == "settled" and item["answer"] == "yes"
    assert item["thread"] == [
        {"from": "dean", "text": "What does the dashboard look like?"},
        {"from": "you", "text": "Here it is.", "files": ["shot.png"]},
    ]
    inbox("member", "remove", "acme", "dean")
    [item] = inbox("read-inbox", "coder")["items"]
    assert item["thread"][0]["from"] == "a former member"
    gone = inbox("reply-inbox", "coder", "deploy", "--text", "still there?", code=1)
    assert gone["error"] == "starter_not_member"
