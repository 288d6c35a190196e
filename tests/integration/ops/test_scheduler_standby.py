"""The scheduler's spare (bus.ops.standby, ``inbox scheduler --standby``) and the standby
switches as ``inbox up`` reads them.

Real processes on the suite's Redis: a real ``inbox up`` whose scheduler is SIGKILLed and
whose spare becomes the scheduler (its heartbeat, a due entry taken). The timing goal
(recovery <= 5 s) is bench/chaos.py's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import redis

from bus.api import Bus
from bus.core.models import now_ms
from bus.core.settings import Settings
from bus.core.status_view import scheduler_beat
from bus.ops.standby import Standby, scheduler_standby_argv, standby_enabled
from bus.ops.up import processes
from tests.support.waiting import wait_for

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("worker", "scheduler", "on"),
    [
        (None, None, True),
        ("0", None, False),  # the scheduler's follows the workers' switch
        ("1", "0", False),
        ("0", "1", True),
        (None, "off", False),
    ],
)
def test_the_schedulers_spare_follows_the_workers_switch_unless_set(
    worker: str | None, scheduler: str | None, on: bool
) -> None:
    env = {
        k: v
        for k, v in {"INBOX_WORKER_STANDBY": worker, "INBOX_SCHEDULER_STANDBY": scheduler}.items()
        if v is not None
    }
    assert standby_enabled(env, scheduler=True) is on
    s = Settings.from_env(env)
    assert s.scheduler_standby is on
    # A child given these settings reads the same switches.
    again = Settings.from_env(s.to_env())
    assert (again.worker_standby, again.scheduler_standby) == (s.worker_standby, on)
    assert standby_enabled(s.child_env({}), scheduler=True) is on


@pytest.mark.parametrize(
    ("env", "worker_spare", "scheduler_spare"),
    [
        ({}, True, True),
        ({"INBOX_WORKER_STANDBY": "0"}, False, False),
        ({"INBOX_WORKER_STANDBY": "0", "INBOX_SCHEDULER_STANDBY": "1"}, False, True),
        ({"INBOX_SCHEDULER_STANDBY": "0"}, True, False),
    ],
)
def test_inbox_up_takes_its_spares_from_its_own_settings(
    env: dict[str, str], worker_spare: bool, scheduler_spare: bool, tmp_path: Path
) -> None:
    settings = Settings.from_env({**env, "INBOX_HOME": str(tmp_path), "INBOX_HOST": "uphost"})
    # The children's environment has no INBOX_* of the caller's: the switch comes from
    # the settings, not from it.
    children = processes(settings, settings.child_env({}), tmp_path, concurrency=1)
    spares = {c.name: c.standby is not None for c in children}
    assert spares == {"worker": worker_spare, "scheduler": scheduler_spare, "commands": False}


def _cold_never() -> subprocess.Popen[bytes]:
    raise AssertionError("a cold scheduler was started while a spare waited")


@pytest.mark.slow
def test_a_dismissed_scheduler_spare_exits_having_run_nothing(
    settings: Settings, tmp_path: Path
) -> None:
    log = tmp_path / "scheduler.log"
    spare = Standby(scheduler_standby_argv(), settings.child_env(), log, _cold_never, after_s=0)
    spare.tend()
    proc = spare.spare
    assert proc is not None and proc.poll() is None
    spare.close()
    assert proc.returncode == 0
    assert "scheduler running" not in log.read_text()
    client = redis.Redis.from_url(settings.store_url(), decode_responses=True)
    try:
        assert not client.exists(Bus(settings).store.k.beat(scheduler_beat(settings.host)))
    finally:
        client.close()


def _children(pid: int) -> dict[int, str]:
    """The live children of ``pid`` with their command lines (Linux's /proc)."""
    out: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            out[int(entry.name)] = cmd
    return out


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_inbox_ups_killed_scheduler_is_followed_by_its_spare(
    settings: Settings, tmp_path: Path
) -> None:
    home = tmp_path / "h"
    env = {k: v for k, v in os.environ.items() if not k.startswith("INBOX_")}
    env.update(
        {
            "INBOX_HOME": str(home),
            "INBOX_HOST": "sparehost",
            "INBOX_REDIS_URL": settings.store_url(),
            "INBOX_BROKER_URL": settings.store_url(),
            "INBOX_KEY_PREFIX": settings.key_prefix,
            "INBOX_MEMORY_SETTINGS": "0",  # the suite's Redis is shared
            # inbox up's own switches: no worker spare, a scheduler spare.
            "INBOX_WORKER_STANDBY": "0",
            "INBOX_SCHEDULER_STANDBY": "1",
            "PYTHONPATH": str(REPO),
        }
    )
    up = subprocess.Popen(
        [sys.executable, "-m", "bus.surfaces.cli.app", "up", "--concurrency", "1"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(up.stdout or []), daemon=True)
    reader.start()
    bus = Bus(settings)
    client = redis.Redis.from_url(settings.store_url(), decode_responses=True)
    beat = bus.store.k.beat(scheduler_beat("sparehost"))

    def spares() -> dict[int, str]:
        return {p: c for p, c in _children(up.pid).items() if "standby" in c}

    try:
        first = int(str(wait_for(lambda: client.hget(beat, "pid"), 120, "the scheduler's beat")))
        assert first in _children(up.pid)
        found = wait_for(spares, 60, "the scheduler's spare")
        assert isinstance(found, dict)
        # Both spares fall due together (the worker's first): only the scheduler's runs.
        ((waiting, cmd),) = found.items()
        assert "scheduler --standby" in cmd, cmd
        os.killpg(first, signal.SIGKILL)
        wait_for(lambda: client.hget(beat, "pid") == str(waiting), 60, "the spare's beat")
        # The spare is the scheduler: it takes what falls due.
        bus.store.schedule.schedule("due", "nobody", now_ms())
        due = bus.store.k.due
        wait_for(lambda: client.zscore(due, "due|nobody") is None, 60, "the due entry taken")
        assert first not in _children(up.pid)  # never two: the killed one was gone first
        assert "scheduler exited (code -9)" in "".join(lines)
        # And a new spare is started behind it (the promoted one keeps its command line).
        wait_for(lambda: set(spares()) - {waiting}, 60, "the next spare")
        left = list(spares())
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGINT)
        code = up.wait(60)
        reader.join(10)
        client.close()
    assert code == 0, "".join(lines)
    # Stopping inbox up ends the promoted scheduler and the spare behind it.
    wait_for(lambda: not any(Path(f"/proc/{p}").exists() for p in left), 30, "all stopped")
