"""Smoke tests: bench/swarm.py at a tiny size and bench/cost.py --quick run and end with
their JSON line (no timing is asserted; the figures live in the bench's output)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_swarm_bench_runs_tiny_and_reports_every_figure(redis_url: str) -> None:
    out = subprocess.run(
        [sys.executable, "bench/swarm.py", "--size", "tiny", "--redis-url", redis_url],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["bench"] == "swarm" and summary["batched"] is True
    for name in ("raw", "ingest", "naive"):
        assert summary[name]["per_s"] > 0 and summary[name]["messages"] == 60
    [e2e] = summary["e2e"]
    assert e2e["workers"] == 1 and e2e["turns"] == 0
    # One notice per batch: at most one per delivery, never one per message.
    assert 1 <= e2e["notices_per_session"] < summary["messages"] / summary["sessions"]
    for side in ("bus", "naive"):
        assert summary["latency"][side]["n"] == 10 and summary["latency"][side]["p99"] >= 0
    assert summary["wake"]["late_ms"]["n"] == summary["sessions"]
    memory = summary["memory"]
    assert memory["keys_per_session"] > 0
    # Running and noticed, then idle (each turn ended, as a Stop hook ends it): the turn's
    # carried set goes at its end, so the idle figure has fewer keys.
    assert memory["by_kind"]["sid:carried"][0] == 1
    assert "sid:carried" not in memory["idle_by_kind"]
    assert 0 < memory["idle_keys_per_session"] < memory["keys_per_session"]
    assert {"ingest_over_raw_xadd", "e2e_over_naive", "latency_p99_bus_over_naive"} <= set(
        summary["ratios"]
    )


@pytest.mark.slow
def test_cost_bench_runs_quick_and_marks_every_goal() -> None:
    """bench/cost.py --quick: every row measured in the run, each goal given its figure and
    a verdict (met or not: the verdict is the bench's output, never asserted here)."""
    out = subprocess.run(
        [sys.executable, "bench/cost.py", "--quick"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["bench"] == "cost" and summary["quick"] is True
    cli = summary["cli"]
    for name in ("send", "reply", "withdraw", "decide", "status", "python", "python_S"):
        assert cli[f"{name}_ms"] > 0
    sparse = summary["sparse"]
    for system in ("naive", "minimal", "bus"):
        row = sparse[system]
        # Every message heard, by a notice (the bus) or a line of its own (the others).
        assert row["messages"] > 0 and row["heard_ms"]["n"] == row["messages"]
        # Net of the idle rate, a quick run's few messages may sit inside its noise
        # (clamped at 0); the gross figure always counts them.
        assert row["gross_cpu_ms_per_msg"] > 0
        assert row["process_ms_per_msg"] >= 0 and row["redis_ms_per_msg"] >= 0
        assert 1 <= row["notices"] <= row["messages"]
    assert sparse["naive"]["notices"] == sparse["naive"]["messages"]
    # The systems got the same arrivals, round by round: one bus ÷ naive figure a round.
    assert sparse["naive"]["messages"] == sparse["bus"]["messages"]
    assert len(sparse["bus_over_naive_rounds"]) == sparse["rounds"]
    assert len(sparse["bus"]["rounds_cpu_ms_per_msg"]) == sparse["rounds"]
    # Each server's commands over the windows: the minimal system's one XADD a message, the
    # bus's script calls.
    assert sparse["minimal"]["top_commands_per_msg"]["xadd"] == 1.0
    assert sparse["bus"]["script_calls_per_msg"] > 0 and sparse["bus"]["script_us_per_call"] > 0
    lone = summary["lone"]
    assert lone["worker_trips_median"] >= 1 and lone["worker_scripts_median"] >= 0
    burst = summary["burst"]
    assert burst["messages"] == 2000 and burst["e2e_notices"] >= 1
    assert burst["ingest_over_raw"] > 0 and burst["e2e_over_naive"] > 0
    assert summary["memory"]["info_bytes_per_session"] != 0
    for level in ("memory", "disk", "replica", "disk_fsync_always"):
        assert summary["durability"][level]["single_median_ms"] > 0
    goals = summary["goals"]
    assert len(goals) == 11 and all(g["met"] in (True, False) for g in goals)
    assert all(isinstance(g["value"], int | float) for g in goals)
    # The table names each goal with its verdict.
    for g in goals:
        assert g["goal"] in out.stdout
