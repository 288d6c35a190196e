"""A worker's spare (bus.ops.standby): imported ahead, promoted by the supervisor's restart.

Real processes: the spare is ``python -m workers.standby`` and becomes a real Celery
worker on the suite's Redis; the timing goal (recovery <= 5 s) is bench/chaos.py's.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from bus.api import Bus
from bus.core.settings import Settings
from bus.ops.standby import Standby, standby_argv, standby_enabled
from bus.ops.supervise import Child, Supervisor, spawn_logged
from tests.support.waiting import wait_for
from tests.support.worker_proc import inbox_worker_argv
from workers.app import make_app
from workers.dispatch import CeleryDispatcher


@pytest.mark.parametrize(
    ("raw", "on"), [(None, True), ("1", True), ("0", False), ("off", False), ("no", False)]
)
def test_the_spare_is_on_unless_turned_off(raw: str | None, on: bool) -> None:
    assert standby_enabled({} if raw is None else {"INBOX_WORKER_STANDBY": raw}) is on


def _cold_never() -> subprocess.Popen[bytes]:
    raise AssertionError("the restart started a cold worker while a spare waited")


def test_a_dismissed_spare_exits_having_started_nothing(settings: Settings, tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    spare = Standby(standby_argv(1), settings.child_env(), log, _cold_never, after_s=0)
    spare.tend()
    proc = spare.spare
    assert proc is not None and proc.poll() is None
    spare.close()
    assert proc.returncode == 0
    assert " ready." not in log.read_text()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_killed_workers_restart_is_its_spare_and_delivers(
    settings: Settings, tmp_path: Path
) -> None:
    env = settings.child_env()
    log = tmp_path / "worker.log"
    cold = spawn_logged(inbox_worker_argv("prefork", 1), env, log)
    spare = Standby(standby_argv(1), env, log, cold, after_s=0)
    bus = Bus(settings, dispatcher=CeleryDispatcher(make_app(settings)))
    client = bus.store.r  # the store's own client: a standalone server's or a cluster's
    beat = bus.store.k.beat(settings.host)
    child = Child("worker", spare, host=settings.host, log=log, standby=spare)
    sup = Supervisor([child], log=lambda _line: None, stall_s=0).start()
    try:
        first = child.proc.pid
        wait_for(lambda: client.hget(beat, "pid") == str(first), 120, "the cold worker ready")
        wait_for(lambda: (sup.poll(), spare.spare is not None)[1], 10, "the spare started")
        assert spare.spare is not None
        waiting = spare.spare.pid
        os.killpg(first, signal.SIGKILL)
        wait_for(lambda: (sup.poll(), child.proc.pid != first)[1], 10, "the restart")
        assert child.proc.pid == waiting and spare.promoted == 1
        # The promoted spare is the host's worker: its beat, and a delivery after the kill.
        wait_for(lambda: client.hget(beat, "pid") == str(waiting), 120, "the spare ready")
        bus.open_session("after")
        bus.turn("after", "start")
        sent = bus.send({"from": "hosta:me", "to_id": "after", "text": "after the kill"})
        floor = settings.home / "inbox" / "after" / "messages.jsonl"
        wait_for(lambda: floor.exists() and sent["id"] in floor.read_text(), 60, "the notice")
        # And the next spare is started behind it.
        wait_for(lambda: (sup.poll(), spare.spare is not None)[1], 10, "the next spare")
        assert spare.spare is not None and spare.spare.pid != waiting
        left = spare.spare
    finally:
        sup.stop(20)
        bus.store.r.close()
    assert child.proc.poll() is not None
    assert left.poll() is not None  # stopping the supervisor ends its spare too
