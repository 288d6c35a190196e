"""The small ``inbox`` entry point (bus/lanes/entry.py): the empty-floor fast path for the hot
commands, with the standard library only, and the full command line for everything else."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from bus.api import Bus
from bus.core.settings import Settings
from bus.lanes import entry

HEAVY = (
    "pydantic",
    "redis",
    "typer",
    "celery",
    "rich",
    "bus.api",
    "bus.core.models",
    "bus.surfaces.cli.app",
)


@pytest.mark.parametrize(
    ("raw", "sid"),
    [
        ('{"session_id": "abc-1", "cwd": "/w"}', "abc-1"),
        ('{"cwd": "/w","session_id" :"abc-1"}', "abc-1"),
        ('{"session_id": "a\\u0062"}', "ab"),  # an escape: read by json
        ('{"tool_input": {"session_id": "inner"}, "session_id": "outer"}', "outer"),
        ('{"session_id": null}', None),
        ("not json", None),
        ("", None),
        ("[1]", None),
    ],
)
def test_the_session_id_is_read_from_the_payload(raw: str, sid: object) -> None:
    assert entry.session_id_of(raw) == sid


def test_what_counts_as_an_empty_floor(tmp_path: Path) -> None:
    d = tmp_path / "s1"
    assert entry.floor_is_empty(str(d)) is None
    d.mkdir()
    (d / "log.jsonl").write_text('{"id": "old"}\n')
    assert entry.floor_is_empty(str(d)) is True
    (d / "messages.jsonl").write_text("")
    assert entry.floor_is_empty(str(d)) is True
    (d / "messages.jsonl").write_text('{"id": "x"}\n')
    assert entry.floor_is_empty(str(d)) is False
    (d / "messages.jsonl").unlink()
    (d / "messages.draining.1.2").write_text("")  # a claim, live or orphaned
    assert entry.floor_is_empty(str(d)) is False
    (d / "messages.draining.1.2").unlink()
    (d / "marks.pending.jsonl").write_text('{"id": "n"}\n')  # marks deferred, Redis down
    assert entry.floor_is_empty(str(d)) is False


def run_entry(env: dict[str, str], *argv: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """``inbox ARGV`` through the entry module, printing which heavy modules it imported."""
    code = (
        "import sys\n"
        "from bus.lanes.entry import main\n"
        f"sys.argv = ['inbox', *{list(argv)!r}]\n"
        "try:\n    main()\n"
        "finally:\n"
        f"    print('IMPORTED', sorted(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def env(settings: Settings) -> dict[str, str]:
    # Redis unreachable: the fast path must not need it.
    return dict(
        settings.child_env(), INBOX_REDIS_URL="redis://127.0.0.1:1/0", INBOX_REDIS_CLUSTER=""
    )


def test_an_empty_floor_is_answered_without_the_library(
    env: dict[str, str], settings: Settings
) -> None:
    Path(settings.home, "inbox", "s1").mkdir(parents=True)
    hook = run_entry(env, "hook", "claude", "PostToolUse", stdin=json.dumps({"session_id": "s1"}))
    assert (hook.returncode, hook.stdout) == (0, "")
    assert "IMPORTED []" in hook.stderr
    drained = run_entry(env, "drain", "s1")
    assert (drained.returncode, drained.stdout) == (0, "[]\n")
    assert "IMPORTED []" in drained.stderr
    stamped = run_entry(env, "drain", "s1", "--stamped")
    assert (stamped.returncode, stamped.stdout) == (0, "")
    # A session this host never opened has nothing waiting for a hook either.
    unknown = run_entry(env, "hook", "claude", "PostToolUse", stdin='{"session_id": "zz"}')
    assert (unknown.returncode, unknown.stdout) == (0, "")
    assert "IMPORTED []" in unknown.stderr


def test_with_redis_down_the_lane_drains_and_defers_the_marks(
    env: dict[str, str], settings: Settings
) -> None:
    down = Bus(replace(settings, redis_url="redis://127.0.0.1:1/0"))
    down.deliver_local("s2", sender="hostb:lead", text="still here")
    hook = run_entry(env, "hook", "claude", "PostToolUse", stdin='{"session_id": "s2"}')
    assert hook.returncode == 0
    context = json.loads(hook.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "still here" in context
    assert down.peek("s2") == []  # claimed by rename, logged, with Redis down
    assert (settings.home / "inbox" / "s2" / "log.jsonl").exists()
    assert "IMPORTED []" in hook.stderr
    # The unknown session and the bad id reach the full command, which refuses them.
    nosuch = run_entry(env, "drain", "nosuch")
    assert nosuch.returncode == 1 and json.loads(nosuch.stdout)["error"] == "not_found"
    bad = run_entry(env, "drain", "a..b/")
    assert bad.returncode == 2 and json.loads(bad.stdout)["error"] == "bad_input"


def test_an_older_installs_console_script_still_starts(
    env: dict[str, str], settings: Settings
) -> None:
    # Its script imports bus.surfaces.entry (pyproject's entry point before bus.lanes).
    Path(settings.home, "inbox", "s1").mkdir(parents=True)
    code = "import sys; sys.argv = ['inbox', 'drain', 's1']; from bus.surfaces.entry import main; main()"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert (out.returncode, out.stdout) == (0, "[]\n"), out.stderr


def test_importing_bus_is_light() -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            # typing too: bus/__init__.py spells TYPE_CHECKING itself to keep it so.
            f"import sys, bus; print(sorted(m for m in {(*HEAVY, 'typing')!r} if m in sys.modules))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.stdout.strip() == "[]"
    from bus import Bus as LazyBus  # the re-exports still work

    assert LazyBus is Bus


@pytest.mark.usefixtures("standalone_store")
def test_a_waiting_notice_is_drained_and_confirmed_without_the_library(
    settings: Settings, bus: Bus
) -> None:
    env = settings.child_env()
    bus.open_session("s3")
    bus.turn("s3", "start")
    sent = [
        bus.send({"from": "hosta:peer", "to_id": "s3", "text": f"m{i}"})["id"] for i in range(2)
    ]
    bus.deliver_session("s3")
    hook = run_entry(env, "hook", "claude", "PostToolUse", stdin='{"session_id": "s3"}')
    assert hook.returncode == 0, hook.stderr
    assert "m1" in json.loads(hook.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "IMPORTED []" in hook.stderr  # neither redis-py nor pydantic
    raw = bus.store.r.hgetall(bus.store.k.s("s3", "msgs"))
    assert {json.loads(v)["mark"] for v in raw.values()} == {"noticed"}
    assert set(bus.store.r.smembers(bus.store.k.s("s3", "carried"))) == set(sent)
    assert bus.store.r.hlen(bus.store.k.s("s3", "floor")) == 0
    # The same for `inbox drain SID`, and with the server's script cache flushed (EVAL).
    bus.send({"from": "hosta:peer", "to_id": "s3", "text": "again"})
    bus.deliver_session("s3")
    bus.store.r.script_flush()
    drained = run_entry(env, "drain", "s3")
    assert drained.returncode == 0, drained.stderr
    [line] = json.loads(drained.stdout)
    assert line["kind"] == "notice" and "IMPORTED []" in drained.stderr
    raw = bus.store.r.hgetall(bus.store.k.s("s3", "msgs"))
    assert {json.loads(v)["mark"] for v in raw.values()} == {"noticed"}


def test_the_small_client_speaks_the_urls_it_can() -> None:
    from bus.lanes import resp as resp_client

    assert resp_client.connect("rediss://localhost:6380/0") is resp_client.UNSUPPORTED
    assert resp_client.connect("redis+sentinel://x") is resp_client.UNSUPPORTED
    with pytest.raises(OSError):
        resp_client.connect("redis://127.0.0.1:1/0")


@pytest.mark.usefixtures("standalone_store")
def test_an_empty_look_tells_redis_the_harness_was_seen_once_a_minute(
    settings: Settings,
) -> None:
    env = settings.child_env()  # Redis answers here
    b = Bus(settings)
    b.open_session("s3")
    key = b.store.k.s("s3", "session")
    b.store.r.hset(key, "last_seen", "1")  # seen long ago
    hook = run_entry(env, "hook", "claude", "PostToolUse", stdin='{"session_id": "s3"}')
    assert (hook.returncode, hook.stdout) == (0, "") and "IMPORTED []" in hook.stderr
    seen = int(b.store.r.hget(key, "last_seen") or 0)
    assert seen > 1  # the empty look reached Redis, without the library
    b.store.r.hset(key, "last_seen", "1")
    assert run_entry(env, "drain", "s3").stdout == "[]\n"
    assert b.store.r.hget(key, "last_seen") == "1"  # within the minute: the floor only
    Path(settings.home, "inbox", "s3").mkdir(parents=True, exist_ok=True)  # opened here
    marker = settings.home / entry.SEEN / "s3"
    old = marker.stat().st_mtime - entry.SEEN_EVERY_S - 1
    import os

    os.utime(marker, (old, old))
    assert run_entry(env, "drain", "s3").stdout == "[]\n"
    assert int(b.store.r.hget(key, "last_seen") or 0) > 1  # a minute later: told again
