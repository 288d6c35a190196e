"""What ``inbox up`` prints: the bus's own lines first (no Celery banner, no root
warning), that the scheduler runs, where the logs are; a clean stop leaves no up.pid."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from bus.ops.supervise import HomeLock
from tests.support.up import Up, up_env
from tests.support.waiting import wait_for


def test_a_released_home_lock_leaves_no_file_and_can_be_taken_again(tmp_path: Path) -> None:
    lock = HomeLock(tmp_path).acquire()
    assert (tmp_path / "up.pid").read_text().strip() == str(os.getpid())
    lock.release()
    assert not (tmp_path / "up.pid").exists()
    HomeLock(tmp_path).acquire().release()


@pytest.mark.slow
def test_inbox_up_says_what_runs_and_stops_clean(tmp_path: Path) -> None:
    home = tmp_path / "h"
    up = Up(up_env(home, "uphost"), "--concurrency", "1")
    proc, lines = up.proc, up.lines
    try:
        assert up.ready.wait(60), up.text
        text = "".join(lines)
        assert lines[0].startswith("inbox up: starting")
        assert "scheduler:  running" in text and "worker:     running" in text
        assert str(home / "logs" / "worker.log") in text
        for noise in ("celery@", "-------------- ", "[config]", "superuser", "SecurityWarning"):
            assert noise not in text, noise
        assert (home / "up.pid").exists()
        worker_log = home / "logs" / "worker.log"
        wait_for(lambda: worker_log.stat().st_size > 0, 90, "the worker's output in its log")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
        code = proc.wait(60)
        up.reader.join(10)
    assert code == 0, "".join(lines)
    assert "inbox up: stopped" in "".join(lines)
    assert not (home / "up.pid").exists()
