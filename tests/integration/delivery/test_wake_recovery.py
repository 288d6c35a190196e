"""A worker killed between a wake's change of the session to running and its wake
command (INBOX_FAULT=wake:before_cmd) must not leave the harness unwoken: the session
counts as running, so nothing else would wake it, and every later message would wait on
a floor no one drains. The next delivery (the sweep dispatches one) runs the command."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from bus.core.settings import Settings
from tests.support.celery_bus import Scheduler, celery_bus, events
from tests.support.waiting import wait_for
from tests.support.worker_proc import WorkerProcess


@pytest.mark.slow
def test_a_worker_killed_before_the_wake_command_still_wakes_the_harness(
    settings: Settings, start_worker: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    s = replace(settings, wake_debounce_s=0.2)
    woke = tmp_path / "woke.txt"
    b = celery_bus(s)
    b.open_session("sleeper", wake_cmd=f"cat >> {woke}")
    b.turn("sleeper", "start")
    b.turn("sleeper", "end")
    doomed = start_worker(s, INBOX_FAULT="wake:before_cmd")
    sch = Scheduler(s)
    try:
        b.send({"from": "hx:peer", "to_id": "sleeper", "text": "wake up", "class": "blocker"})
        wait_for(lambda: any("SIGKILL" in line for line in list(doomed.log)), what="the kill")
        doomed.kill()
        # Killed between the two: running, the wake pending, the command never run.
        info = b.session("sleeper")
        assert info is not None and info.state == "running" and info.wake_pending
        assert not woke.exists() and not events(b, "sleeper", "wake")
        start_worker(s)  # the host's worker again; the scheduler's sweep dispatches
        wait_for(lambda: woke.exists() and "wake up" in woke.read_text(), what="the wake")
        wait_for(lambda: events(b, "sleeper", "wake"), what="the wake record")
    finally:
        sch.stop()
    info = b.session("sleeper")
    assert info is not None and info.wake_pending is None
    assert len(events(b, "sleeper", "wake")) == 1
    assert woke.read_text().count("[inbox") == 1  # woken once, with the one notice
