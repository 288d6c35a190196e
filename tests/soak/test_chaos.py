"""The chaos soak, 60 seconds of it: nothing lost, nothing stored twice, no mark left new."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO


@pytest.mark.slow
@pytest.mark.timeout(900)  # 60 s of faults plus the settle: past the suite's 120 s default
def test_a_60_second_chaos_soak_loses_nothing_and_doubles_nothing(tmp_path: Path) -> None:
    # Output to files, not pipes: a grandchild that outlives the soak cannot hold them open.
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    with open(out, "wb") as o, open(err, "wb") as e:
        proc = subprocess.Popen(
            [
                sys.executable,
                str(REPO / "bench" / "chaos.py"),
                *("--duration", "60", "--messages", "2400", "--sessions", "12"),
                *("--senders", "3", "--faults", "3", "--settle", "60"),
                # Every wait inside is bounded by this, so the soak reports well before
                # the test's own timeout; its stacks are dumped if something still hangs.
                *("--deadline", "420"),
            ],
            stdout=o,
            stderr=e,
            start_new_session=True,
        )
        try:
            proc.wait(840)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    stdout, stderr = out.read_text(), err.read_text()
    lines = stdout.strip().splitlines()
    assert lines and lines[-1].startswith("{"), f"no accounting; stderr:\n{stderr[-6000:]}"
    res = json.loads(lines[-1])
    assert res["supervised"], "the topology restarts what the soak kills"
    assert not res["incidents"], stdout + stderr[-4000:]
    assert res["lost"] == 0 and res["stored_twice"] == 0, stdout
    assert res["stored_once"] == res["sent"] > 0
    assert res["not_heard"] == 0, stdout
    # A notice carried again after a kill is not handed on twice (bus.delivery.said).
    assert res["heard_twice"] == 0, stdout
    # A drain SIGKILLed after its claim gives its notice back (bus.delivery.heard): nothing new.
    assert res["marks_new"] == 0, stdout
    assert res["recoveries_failed"] == 0, stdout + stderr[-4000:]
