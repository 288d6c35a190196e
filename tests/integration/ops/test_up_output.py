"""What ``inbox up`` prints: the bus's own lines first (no Celery banner, no root
warning), that the scheduler runs, where the logs are; a clean stop leaves no up.pid."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from bus.ops.supervise import HomeLock
from tests.support.waiting import wait_for

REPO = Path(__file__).resolve().parents[3]


def test_a_released_home_lock_leaves_no_file_and_can_be_taken_again(tmp_path: Path) -> None:
    lock = HomeLock(tmp_path).acquire()
    assert (tmp_path / "up.pid").read_text().strip() == str(os.getpid())
    lock.release()
    assert not (tmp_path / "up.pid").exists()
    HomeLock(tmp_path).acquire().release()


@pytest.mark.slow
def test_inbox_up_says_what_runs_and_stops_clean(tmp_path: Path) -> None:
    home = tmp_path / "h"
    env = {k: v for k, v in os.environ.items() if not k.startswith("INBOX_")}
    env.update({"INBOX_HOME": str(home), "INBOX_HOST": "uphost", "PYTHONPATH": str(REPO)})
    proc = subprocess.Popen(
        [sys.executable, "-m", "bus.surfaces.cli.app", "up", "--concurrency", "1"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    ready = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "Ctrl-C stops everything" in line:
                ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert ready.wait(60), "".join(lines)
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
        reader.join(10)
    assert code == 0, "".join(lines)
    assert "inbox up: stopped" in "".join(lines)
    assert not (home / "up.pid").exists()
