"""A session's wake command is started, handed the notice and left to run, up to its limit
(bus.delivery.wake_cmd)."""

from __future__ import annotations

import os
from pathlib import Path

from bus.delivery import wake_cmd
from tests.support.waiting import wait_for


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie still answers kill(0); its state in /proc says so.
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_a_long_wake_command_is_left_running_with_the_notice_and_reaped_when_it_ends(
    tmp_path: Path,
) -> None:
    go, out = tmp_path / "go", tmp_path / "notice.txt"
    # A turn: it reads the notice, then runs until told to finish.
    cmd = f"cat > {out}; until [ -e {go} ]; do sleep 0.05; done"
    proc = wake_cmd.start("sleeper", cmd, "[inbox · 1 new]", limit_s=600, wait_s=0.2)
    assert proc is not None
    wait_for(lambda: out.exists() and out.read_text() == "[inbox · 1 new]", 30, what="stdin")
    assert proc.poll() is None  # start returned; the command still runs
    go.touch()
    # The worker's thread reaps it: no zombie left.
    wait_for(lambda: proc.returncode is not None, 30, what="the command reaped")
    assert proc.returncode == 0


def test_a_wake_command_past_its_limit_is_ended_with_its_whole_group(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    # The command and a child of its own (a turn's tool), both running for ever.
    cmd = f"sleep 300 & echo $$ $! > {pids}; cat > /dev/null; wait"
    proc = wake_cmd.start("sleeper", cmd, "[inbox · 1 new]", limit_s=0.5, wait_s=0.1)
    assert proc is not None
    wait_for(lambda: pids.exists() and len(pids.read_text().split()) == 2, 30, what="pids")
    shell, child = (int(p) for p in pids.read_text().split())
    wait_for(lambda: _gone(shell) and _gone(child), 30, what="the group ended at its limit")
    wait_for(lambda: proc.returncode is not None, 30, what="the command reaped")


def test_a_quick_wake_command_is_over_when_start_returns(tmp_path: Path) -> None:
    out = tmp_path / "notice.txt"
    proc = wake_cmd.start("sleeper", f"cat > {out}", "[inbox · 2 new]", limit_s=600, wait_s=30)
    assert proc is not None and proc.returncode == 0
    assert out.read_text() == "[inbox · 2 new]"


def test_a_wake_command_that_cannot_start_is_none() -> None:
    assert wake_cmd.start("sleeper", "/nonexistent/waker", "x", limit_s=1) is None
