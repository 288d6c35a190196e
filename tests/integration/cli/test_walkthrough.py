"""The README's walkthroughs, run as a user runs them (subprocess CLI, real Redis)."""

from __future__ import annotations

import json
import re
import struct
import subprocess
import sys
import zlib
from dataclasses import replace
from pathlib import Path

import pytest

from bus.core.settings import Settings


@pytest.fixture
def inbox(settings: Settings):  # type: ignore[no-untyped-def]
    env = settings.child_env()
    env["INBOX_DISPATCHER"] = "none"
    env["INBOX_HOST"] = "neo"

    def run(*args: str, session: str | None = None, code: int = 0) -> dict:  # type: ignore[type-arg]
        e = dict(env, **({"INBOX_SESSION": session} if session else {}))
        out = subprocess.run(
            [sys.executable, "-m", "bus.surfaces.cli.app", *args],
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
        "allowed": ["clarify"],
        "message": own["message"],
    }
    assert "your offer standing" in own["message"] and "you may: clarify" in own["message"]
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
        str(sandbox / "shot.png"),
        "--root",
        str(sandbox),
    )
    assert reply["files"] == ["shot.png"]
    refused = inbox(
        "reply-inbox",
        "coder",
        "deploy",
        "--image",
        str(sandbox / "notes.png"),
        "--root",
        str(sandbox),
        code=2,
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


# -- the README's sh blocks, exactly as written --------------------------------------------

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "README.md"
# The README first, then the documentation site's pages: a walkthrough may live in either.
PAGES = (README, *sorted((ROOT / "docs").rglob("*.md")))
WALKTHROUGHS = (
    "Five minutes",
    "Typed requests",
    "Items for members",
    "Authenticated senders",
    "Receipts and the outbox",
    "The web inbox",
)


def blocks(heading: str) -> dict[Path, str]:
    """The first ```sh block under ``heading`` in each page that has one."""
    found: dict[Path, str] = {}
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        head = re.search(rf"\n#{{2,3}} {re.escape(heading)}", text)
        if head and "```sh\n" in text[head.end() :]:
            start = text.index("```sh\n", head.end()) + len("```sh\n")
            found[page] = text[start : text.index("```", start)]
    return found


def readme_block(heading: str) -> str:
    """The first ```sh block under the heading (## or ###) that starts with ``heading``, in
    the README or else in the first page of docs/ that has it."""
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        found = re.search(rf"\n#{{2,3}} {re.escape(heading)}", text)
        if found:
            start = text.index("```sh\n", found.end()) + len("```sh\n")
            return text[start : text.index("```", start)]
    raise AssertionError(f"no heading {heading!r} in the README or docs/")


def commands(block: str) -> list[tuple[str, int]]:
    """Each command of a block (continuation lines joined) with the exit code its comment
    promises: ``exit N`` in the comment, else 0."""
    out: list[tuple[str, int]] = []
    pending = ""
    for line in block.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            if out and line.lstrip().startswith("#") and "exit " in line:
                out[-1] = (out[-1][0], int(line.split("exit ", 1)[1][0]))
            continue
        pending += line + "\n"
        if line.endswith("\\"):
            continue
        comment = pending.split(" # ", 1)[1] if " # " in pending else ""
        code = int(comment.split("exit ", 1)[1][0]) if "exit " in comment else 0
        out.append((pending.rstrip("\n"), code))
        pending = ""
    return out


def run_block(heading: str, env: dict[str, str], cwd: Path) -> list[str]:
    """Run a README block in one bash, as pasted; each command must exit as promised.
    Returns each command's stdout."""
    cmds = commands(readme_block(heading))
    script = "".join(f"{cmd}\nprintf '\\n::rc %s\\n' \"$?\"\n" for cmd, _ in cmds)
    done = subprocess.run(
        ["bash", "-c", script], env=env, cwd=cwd, capture_output=True, text=True, timeout=300
    )
    parts = done.stdout.split("\n::rc ")
    outs = [parts[0]] + [p.split("\n", 1)[1] if "\n" in p else "" for p in parts[1:-1]]
    codes = [int(p.split("\n", 1)[0]) for p in parts[1:]]
    assert len(codes) == len(cmds), (done.stdout, done.stderr)
    for (cmd, want), got, out in zip(cmds, codes, outs, strict=True):
        assert got == want, f"{cmd!r} exited {got}, not {want}:\n{out}\n{done.stderr}"
    assert "command not found" not in done.stderr, done.stderr
    return [o.strip() for o in outs]


@pytest.fixture
def shell_env(settings: Settings) -> dict[str, str]:
    """A user's shell after `source .venv/bin/activate`: inbox on PATH, this test's bus."""
    env = settings.child_env()
    env["PATH"] = f"{Path(sys.executable).parent}:/usr/bin:/bin"
    env["INBOX_HOST"] = "neo"
    return env


def test_the_readme_blocks_are_found() -> None:
    for heading in WALKTHROUGHS:
        assert commands(readme_block(heading))


def test_getting_started_s_five_minutes_is_the_readme_s_that_runs() -> None:
    copies = blocks("Five minutes")
    assert ROOT / "docs" / "getting-started.md" in copies
    for page, block in copies.items():
        assert block == readme_block("Five minutes"), f"{page.relative_to(ROOT)} differs"
    typed = commands(readme_block("Typed requests"))
    assert [code for _, code in typed].count(1) == 2


@pytest.mark.slow
def test_five_minutes_as_written(
    settings: Settings,
    shell_env: dict[str, str],
    start_worker,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    import threading

    from bus.api import Bus
    from bus.delivery.scheduler import run as run_scheduler
    from workers.app import make_app
    from workers.dispatch import CeleryDispatcher

    s = replace(settings, host="neo")
    start_worker(s)  # terminal 1's `make up`: a worker and the scheduler for this bus
    bus = Bus(s, dispatcher=CeleryDispatcher(make_app(s)))
    stop = threading.Event()
    ticker = threading.Thread(target=run_scheduler, args=(bus.delivery, stop), daemon=True)
    ticker.start()
    try:
        outs = run_block("Five minutes", shell_env, tmp_path)
    finally:
        stop.set()
        ticker.join(10)
    stamped = outs[3]
    assert stamped.startswith("[inbox · 1 new in 1 thread") and "look at the diff" in stamped
    read = json.loads(outs[5])
    assert read["messages"][0]["text"] == "look at the diff"
    status = json.loads(outs[7])
    [demo] = [x for x in status["sessions"] if x["session"] == "demo"]
    assert demo["state"] == "idle" and demo["backlog"] == 0
    assert "demo" in outs[8] and "idle" in outs[8]  # the plain table, no terminal


def test_typed_requests_as_written(shell_env: dict[str, str], tmp_path: Path) -> None:
    outs = run_block("Typed requests", dict(shell_env, INBOX_DISPATCHER="none"), tmp_path)
    assert json.loads(outs[2])["state"] == "REQUESTED"
    own_offer = json.loads(outs[5])
    assert own_offer["error"] == "invalid_for_state"
    assert own_offer["state"] == "OFFERED" and own_offer["allowed"] == ["clarify"]
    assert "you may: clarify" in own_offer["message"]
    assert json.loads(outs[6])["new_state"] == "CONFIRMED"
    assert json.loads(outs[7])["error"] == "thread_terminal"


def test_items_as_written(shell_env: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "sandbox").mkdir()
    (tmp_path / "sandbox" / "shot.png").write_bytes(tiny_png())
    outs = run_block("Items for members", dict(shell_env, INBOX_DISPATCHER="none"), tmp_path)
    [item] = json.loads(outs[-1])["items"]
    assert item["status"] == "settled" and item["thread"][1]["files"] == ["shot.png"]


def test_authenticated_senders_as_written(shell_env: dict[str, str], tmp_path: Path) -> None:
    outs = run_block("Authenticated senders", dict(shell_env, INBOX_DISPATCHER="none"), tmp_path)
    sent = json.loads(outs[4])
    assert sent["state"] == "stored"
    assert json.loads(outs[5])["error"] == "token_missing"
    assert json.loads(outs[7])["error"] == "token_revoked"


@pytest.mark.slow
def test_receipts_as_written(
    settings: Settings,
    shell_env: dict[str, str],
    start_worker,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    import threading

    from bus.api import Bus
    from bus.delivery.scheduler import run as run_scheduler
    from workers.app import make_app
    from workers.dispatch import CeleryDispatcher

    s = replace(settings, host="neo")
    start_worker(s)  # `make up`: a worker and the scheduler for this bus
    bus = Bus(s, dispatcher=CeleryDispatcher(make_app(s)))
    stop = threading.Event()
    ticker = threading.Thread(target=run_scheduler, args=(bus.delivery, stop), daemon=True)
    ticker.start()
    try:
        outs = run_block("Receipts and the outbox", shell_env, tmp_path)
    finally:
        stop.set()
        ticker.join(10)
    assert json.loads(outs[5])["state"] == "stored"
    assert "look at the diff" in outs[7]
    read = json.loads(outs[9])
    assert read["ok"] is True and read["state"] == "read"
    # The receipt the README shows after this command, field by field where it names one.
    shown = re.search(
        r'"recipient": \{"session": "(\w+)", "state": "(\w+)"',
        readme_block("Receipts and the outbox"),
    )
    assert shown is not None
    assert [read["recipient"]["session"], read["recipient"]["state"]] == list(shown.groups())
    [sent] = json.loads(outs[10])["sent"]
    assert sent["state"] == "read"


def test_the_web_inbox_links_as_written(shell_env: dict[str, str], tmp_path: Path) -> None:
    outs = run_block("The web inbox", dict(shell_env, INBOX_DISPATCHER="none"), tmp_path)
    link = json.loads(outs[3])
    assert link["url"].startswith("https://inbox.example/ui/login?token=")
    assert json.loads(outs[4])["ok"] is True
