"""The ``inbox`` command line, run as a user runs it (subprocesses)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from bus.api import Bus
from bus.core.models import now_ms
from bus.core.settings import Settings
from bus.surfaces.command_server import socket_path
from tests.support.cli import inbox
from tests.support.import_trace import imported
from tests.support.up import Up, up_env
from tests.support.waiting import wait_for


@pytest.fixture
def env(settings: Settings) -> dict[str, str]:
    e = settings.child_env()
    e["INBOX_DISPATCHER"] = "none"
    return e


def tree(home: Path) -> list[str]:
    return sorted(str(p.relative_to(home)) for p in home.rglob("*"))


@pytest.mark.parametrize("sid", ["a/b", "..", "a\x00b"[:1] + "\\x00", "x" * 181, "a b", ""])
def test_bad_session_ids_exit_2_with_one_line_and_write_nothing(
    env: dict[str, str], home: Path, sid: str
) -> None:
    for args in (
        ["deliver", sid, "--from", "h:me", "--text", "hi"],
        ["send", "--to-id", sid, "--from", "h:me", "--text", "hi"],
        ["session", "open", sid],
        ["drain", sid],
        ["peek", sid],
    ):
        out = inbox(env, *args)
        assert out.returncode == 2, (args, out.stderr)
        assert out.stderr.count("\n") == 1 and "session id" in out.stderr
        assert json.loads(out.stdout)["ok"] is False
    assert tree(home) == []


def test_nul_in_a_session_id_is_refused(env: dict[str, str], home: Path) -> None:
    # argv cannot carry NUL, so this goes through the JSONL door.
    line = json.dumps({"from": "h:me", "to_id": "a\u0000b", "text": "hi"})
    out = inbox(env, "send", "--jsonl", "-", stdin=line + "\n")
    assert out.returncode == 1
    assert json.loads(out.stdout)["error"] == "bad_input" and "to_id" in out.stdout
    assert tree(home) == []


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--text", "x" * 8001], "longer than 8000"),
        (["--text", "hi", "--urgency", "now"], "urgency"),
    ],
)
def test_bad_text_and_urgency_are_refused(
    env: dict[str, str], home: Path, extra: list[str], needle: str
) -> None:
    out = inbox(env, "deliver", "s1", "--from", "h:me", *extra)
    assert out.returncode == 2 and needle in out.stderr
    assert tree(home) == []


def test_deliver_needs_no_redis(settings: Settings, home: Path) -> None:
    e = settings.child_env()
    e["INBOX_REDIS_URL"] = "redis://127.0.0.1:1/0"  # nothing listens there
    out = inbox(e, "deliver", "s1", "--from", "h:me", "--text", "hello")
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout)
    assert answer["via"] == "file" and answer["path"].endswith("messages.jsonl")
    drained = inbox(e, "drain", "s1", "--stamped")
    assert "[inbox from h:me" in drained.stdout and "│ hello" in drained.stdout


def test_send_to_a_dead_redis_says_so(settings: Settings) -> None:
    e = settings.child_env()
    e["INBOX_REDIS_URL"] = "redis://127.0.0.1:1/0"
    out = inbox(e, "send", "--to-id", "s1", "--from", "h:me", "--text", "hello")
    assert out.returncode == 3 and "Redis did not answer" in out.stderr


def test_session_send_status_round_trip(env: dict[str, str]) -> None:
    assert inbox(env, "session", "open", "s1", "--handle", "hosta:one").returncode == 0
    sent = inbox(env, "send", "--to", "hosta:one", "--from", "hosta:me", "--text", "hi")
    assert sent.returncode == 0, sent.stderr
    answer = json.loads(sent.stdout)
    assert answer["state"] == "stored" and answer["recipient"]["session"] == "s1"
    status = json.loads(inbox(env, "status").stdout)
    assert [s["backlog"] for s in status["sessions"] if s["session"] == "s1"] == [1]
    unknown = inbox(env, "send", "--to", "hosta:nobody", "--from", "hosta:me", "--text", "hi")
    assert unknown.returncode == 1 and "no live session" in unknown.stderr


def test_jsonl_send_answers_one_line_per_message(env: dict[str, str]) -> None:
    inbox(env, "session", "open", "s1")
    lines = "\n".join(
        json.dumps({"from": "h:me", "to_id": "s1", "text": f"m{i}"}) for i in range(3)
    )
    out = inbox(env, "send", "--jsonl", "-", stdin=lines + "\n")
    answers = [json.loads(x) for x in out.stdout.splitlines()]
    assert out.returncode == 0 and [a["state"] for a in answers] == ["stored"] * 3


@pytest.mark.slow
def test_inbox_up_starts_accepts_a_send_delivers_it_and_stops_cleanly(tmp_path: Path) -> None:
    home = tmp_path / "h"
    e = up_env(home, "uphost")
    up = Up(e, "--concurrency", "1", until="inbox send")
    proc, log = up.proc, up.lines
    try:
        assert up.ready.wait(60), up.text
        # No INBOX_REDIS_URL: the CLI finds the embedded server through INBOX_HOME.
        assert inbox(e, "session", "open", "demo").returncode == 0
        # Right after the start, before (or at) the worker's first beat: its host is
        # starting (or up), never called down (status, the send's answer and its line).
        rows = {r["name"]: r for r in json.loads(inbox(e, "status").stdout)["workers"]}
        assert rows["uphost"]["state"] in ("starting", "up"), rows
        sent = inbox(e, "send", "--to-id", "demo", "--from", "uphost:me", "--text", "hello up")
        assert sent.returncode == 0, sent.stderr
        assert json.loads(sent.stdout)["recipient"]["host_state"] in ("starting", "up")
        assert "down" not in sent.stderr and "no worker" not in sent.stderr, sent.stderr
        msg_id = json.loads(sent.stdout)["id"]

        def on_floor() -> Any:
            # Its first work wakes the idle session: one notice after the debounce, which
            # the scheduler that inbox up started runs.
            lines = json.loads(inbox(e, "peek", "demo").stdout)
            return [m for m in lines if msg_id in m.get("notice", {}).get("messages", [])]

        wait_for(on_floor, timeout=60, what="a notice via inbox up's worker", interval=0.3)
        # The write commands' warm start is one of inbox up's processes: a send through
        # the console entry is run by it (the process never imports the library).
        sock = socket_path(home)
        wait_for(sock.exists, timeout=60, what="inbox up's command server", interval=0.1)
        warm, modules = imported(
            e, "send", "--to-id", "demo", "--from", "uphost:me", "--text", "warm"
        )
        assert warm.returncode == 0, warm.stderr
        assert json.loads(warm.stdout)["state"] == "stored"
        assert "bus.api" not in modules
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
        code = proc.wait(60)
    assert code == 0, "".join(log)
    assert "inbox up: stopped" in "".join(log)
    assert not socket_path(home).exists()
    assert (home / "redis" / "appendonly.aof").exists() or (
        home / "redis" / "appendonlydir"
    ).exists()


def test_watch_follows_a_session_live(env: dict[str, str]) -> None:
    inbox(env, "session", "open", "w1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "bus.surfaces.cli.app", "watch", "w1"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        got: list[str] = []
        seen = threading.Event()

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                got.append(line)
                seen.set()

        threading.Thread(target=read, daemon=True).start()

        def sent_and_seen() -> bool:
            # The watcher starts reading at "$": send until it is following.
            inbox(env, "send", "--to-id", "w1", "--from", "h:me", "--text", "live")
            return seen.wait(1.0)

        wait_for(sent_and_seen, timeout=30, what="the watcher's first line")
        event = json.loads(got[0])
        assert event["session"] == "w1" and event["message"]["text"] == "live"
    finally:
        proc.terminate()
        proc.wait(10)


def test_an_ambiguous_handle_lists_the_candidates_and_sends_nothing(
    env: dict[str, str], bus: Bus
) -> None:
    inbox(env, "session", "open", "one", "--handle", "hosta:twin")
    # "one"'s harness unseen for two hours (stale: never sooner than an hour, whatever
    # INBOX_STALE_S says), so "two" may take the handle.
    bus.store.sessions.touch_seen("one", now_ms() - 2 * 3600 * 1000)
    assert inbox(env, "session", "open", "two", "--handle", "hosta:twin").returncode == 0
    inbox(env, "turn", "one", "start")
    out = inbox(env, "send", "--to", "hosta:twin", "--from", "h:me", "--text", "hi")
    assert out.returncode == 1 and "2 live sessions" in out.stderr
    answer = json.loads(out.stdout)
    assert answer["error"] == "ambiguous"
    assert sorted(c["session"] for c in answer["candidates"]) == ["one", "two"]
    assert all({"state", "age_s"} <= set(c) for c in answer["candidates"])
    status = json.loads(inbox(env, "status").stdout)
    assert all(s["backlog"] == 0 for s in status["sessions"])


def test_inbox_listen_acks_and_prints_what_arrives(env: dict[str, str], home: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "bus.surfaces.cli.app", "listen", "s1"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        sock = home / "inbox" / "s1" / "inbox.sock"
        wait_for(sock.exists, timeout=20, what="the listener's socket")
        out = inbox(env, "deliver", "s1", "--from", "h:me", "--text", "live line")
        assert json.loads(out.stdout)["via"] == "socket"
        assert proc.stdout is not None
        printed = json.loads(proc.stdout.readline())
        assert printed["text"] == "live line"
        assert not (home / "inbox" / "s1" / "messages.jsonl").exists()
    finally:
        proc.terminate()
        proc.wait(10)
    assert not sock.exists()  # a stopped listener removes its socket
