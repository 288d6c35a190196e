"""The chaos soak, 60 seconds of it: nothing lost, nothing stored twice, no mark left new."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.slow
@pytest.mark.timeout(900)  # 60 s of faults plus the settle: past the suite's 120 s default
def test_a_60_second_chaos_soak_loses_nothing_and_doubles_nothing() -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "chaos.py"),
            *("--duration", "60", "--messages", "2400", "--sessions", "12"),
            *("--senders", "3", "--faults", "3", "--settle", "60"),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    res = json.loads(done.stdout.strip().splitlines()[-1])
    assert res["supervised"], "the topology restarts what the soak kills"
    assert res["lost"] == 0 and res["stored_twice"] == 0, done.stdout
    assert res["stored_once"] == res["sent"] > 0
    assert res["not_heard"] == 0, done.stdout
    # A drain SIGKILLed after its claim gives its notice back (bus.confirm): nothing new.
    assert res["marks_new"] == 0, done.stdout
    assert res["recoveries_failed"] == 0, done.stdout
