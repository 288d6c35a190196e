"""Adding a host to a running bus: a second ``inbox up`` given the store URL the first
prints; a worker that cannot start says why on ``inbox up``'s console."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from bus.core.settings import SOURCE_ROOT, Settings
from bus.local.up_procs import process_rows
from bus.ops.exit_reason import exit_reason, log_since
from tests.support.cli import inbox
from tests.support.up import Up
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow


def host_env(home: Path, host: str, *, spares: bool = False, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INBOX_")}
    env.update(
        INBOX_HOME=str(home),
        INBOX_HOST=host,
        PYTHONPATH=str(SOURCE_ROOT),
        # Without spares unless asked: one idle process less per child.
        INBOX_WORKER_STANDBY="1" if spares else "0",
        INBOX_WAKE_DEBOUNCE_S="0.3",
        **extra,
    )
    return env


@pytest.fixture
def homes() -> Iterator[list[Path]]:
    made = [Path(tempfile.mkdtemp(prefix="ih-")) for _ in range(2)]
    yield made
    for h in made:
        shutil.rmtree(h, ignore_errors=True)


def test_a_second_up_joins_with_the_printed_store_url(homes: list[Path]) -> None:
    first = Up(host_env(homes[0], "hosta", spares=True), "--concurrency", "1")
    second: Up | None = None
    try:
        banner = first.line(r"^inbox up: host hosta, store ")
        url = re.search(r"store (\S+),", banner).group(1)  # type: ignore[union-attr]
        assert url.startswith("unix://")
        # inbox status prints the same URL, and every process inbox up runs, the spares
        # (started SPARE_AFTER_S after their child) named as such.
        status = json.loads(inbox(first.env, "status").stdout)
        assert status["store"] == url
        every = {
            "inbox up", "redis", "worker", "worker standby", "scheduler", "scheduler standby",
            "commands",
        }  # fmt: skip

        def all_running() -> object:
            rows = json.loads(inbox(first.env, "status").stdout)["processes"]
            return rows if {r["name"] for r in rows if r["alive"]} == every else None

        rows = wait_for(all_running, timeout=60, what="every process in status", interval=0.5)
        by_name = {r["name"]: r for r in rows}  # type: ignore[attr-defined]
        assert by_name["worker standby"]["standby"] and by_name["scheduler standby"]["standby"]
        assert not by_name["worker"]["standby"] and by_name["worker"]["host"] == "hosta"
        assert by_name["worker"]["children"]  # its pool process
        assert len({r["pid"] for r in rows}) == len(every)  # type: ignore[attr-defined]

        second = Up(host_env(homes[1], "hostb", INBOX_REDIS_URL=url), "--concurrency", "1")
        started = second.line(r"^inbox up: starting ")
        assert "Redis" not in started and url in started
        second.line(r"^inbox up: host hostb, store ")
        env_b = second.env
        assert inbox(env_b, "session", "open", "demo").returncode == 0
        sent = inbox(first.env, "send", "--to-id", "demo", "--from", "hosta:me", "--text", "hi b")
        assert sent.returncode == 0, sent.stderr
        msg_id = json.loads(sent.stdout)["id"]

        def on_b_floor() -> object:
            lines = json.loads(inbox(env_b, "peek", "demo").stdout)
            return [m for m in lines if msg_id in m.get("notice", {}).get("messages", [])]

        wait_for(on_b_floor, timeout=60, what="a notice on host b's floor", interval=0.3)
        assert not any("exited" in ln for ln in second.lines), "".join(second.lines)
    finally:
        if second is not None:
            second.stop()
        first.stop()
    assert not (homes[0] / "up.procs.json").exists()  # a clean stop leaves no record


def test_a_worker_that_cannot_start_says_why_on_the_console(
    homes: list[Path], settings: Settings
) -> None:
    up = Up(
        host_env(
            homes[0],
            "hostc",
            INBOX_REDIS_URL=settings.store_url(),
            INBOX_KEY_PREFIX=settings.key_prefix,
            INBOX_BROKER_URL="nosuch://nowhere",
        ),
        "--concurrency",
        "1",
    )
    try:
        line = up.line(r"worker exited \(code 1\)")
        assert "No such transport: nosuch" in line and "restarting in" in line
        assert line.startswith("inbox up: worker exited (code 1) after ")
    finally:
        up.stop()


@pytest.mark.parametrize(
    ("lines", "reason"),
    [
        (
            [
                "Traceback (most recent call last):",
                '  File "x.py"',
                "KeyError: 'No such transport: unix'",
            ],
            "KeyError: 'No such transport: unix'",
        ),
        (
            ["ok", "kombu.exceptions.OperationalError: Error 111 connecting"],
            "kombu.exceptions.OperationalError: Error 111 connecting",
        ),
        (
            ["[2026-01-01 10:00:00,000: ERROR/MainProcess] consumer: cannot connect", "-- ready"],
            "[2026-01-01 10:00:00,000: ERROR/MainProcess] consumer: cannot connect",
        ),
        (
            ["inbox worker: host a is served by another floor", ""],
            "inbox worker: host a is served by another floor",
        ),
        (["Error: Invalid value for '-P'"], "Error: Invalid value for '-P'"),
        (
            ['{"ok": false, "error": "bad_input", "message": "INBOX_X"}'],
            '{"ok": false, "error": "bad_input", "message": "INBOX_X"}',
        ),
        (["celery@h ready.", "worker: Warm shutdown (MainProcess)"], None),
        ([], None),
        (["ValueError: " + "x" * 400], "ValueError: " + "x" * 285 + "..."),
    ],
)
def test_exit_reason(lines: list[str], reason: str | None) -> None:
    assert exit_reason(lines) == reason


def test_log_since_reads_only_the_runs_own_lines(tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    log.write_text("KeyError: 'old run'\n")
    offset = log.stat().st_size
    with log.open("a") as f:
        f.write("booting\n")
    assert exit_reason(log_since(log, offset)) is None
    assert log_since(tmp_path / "absent.log", 0) == []


def _alive(pid: int) -> bool:
    return pid in (1, 2, 3)


@pytest.mark.parametrize(
    ("rows", "want"),
    [
        ([], []),
        # The supervisor is gone: a stale file shows nothing.
        ([{"name": "inbox up", "role": "supervisor", "pid": 9}], []),
        (
            [
                {"name": "inbox up", "role": "supervisor", "pid": 1},
                {"name": "worker", "role": "worker", "standby": False, "pid": 2},
                {"name": "worker standby", "role": "worker", "standby": True, "pid": 3},
                {"name": "scheduler", "role": "scheduler", "standby": False, "pid": 8},
                {"name": "redis", "role": "redis", "standby": False},
            ],
            [
                {"name": "inbox up", "role": "supervisor", "pid": 1, "alive": True},
                {
                    "name": "worker",
                    "role": "worker",
                    "standby": False,
                    "pid": 2,
                    "alive": True,
                    "children": [20, 21],
                },
                {
                    "name": "worker standby",
                    "role": "worker",
                    "standby": True,
                    "pid": 3,
                    "alive": True,
                },
                {
                    "name": "scheduler",
                    "role": "scheduler",
                    "standby": False,
                    "pid": 8,
                    "alive": False,
                },
                {"name": "redis", "role": "redis", "standby": False, "alive": False},
            ],
        ),
    ],
)
def test_process_rows(rows: list[dict[str, object]], want: list[dict[str, object]]) -> None:
    assert process_rows(rows, _alive, lambda pid: [pid * 10, pid * 10 + 1]) == want
