"""A wake command that fails frees its session at once (``wake_error`` in status and
doctor) and the next wake's prompt counts each thread once; the command runs with the
``PATH`` its opener kept; a session whose harness is gone is closed by a wake instead of
running the command (bus.delivery.notice, bus.delivery.kept_wake). The delivery runs in
this process on an injected clock; the commands are real processes."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from bus.api import Bus
from bus.core.clock import ManualClock
from bus.delivery import kept_wake
from bus.delivery.dispatch import RecordingDispatcher
from bus.delivery.scheduler import tick
from bus.ops.doctor import doctor_report
from bus.surfaces.harness import hooks
from tests.support.celery_bus import events
from tests.support.waiting import wait_for


def _bus(make_bus: Callable[..., Bus]) -> tuple[Bus, ManualClock]:
    clock = ManualClock(int(time.time() * 1000))
    return make_bus(clock=clock, dispatcher=RecordingDispatcher(), wake_turn_timeout_s=300), clock


def _wake(b: Bus, clock: ManualClock, sid: str, text: str) -> None:
    """A blocker from h:lead for the idle session, its debounce passed: woken."""
    b.send({"from": "h:lead", "to_id": sid, "text": text, "class": "blocker"})
    b.deliver_session(sid)  # plans the debounced wake
    clock.advance(int(b.settings.wake_debounce_s * 1000) + 1000)
    tick(b.delivery, sweep=False, clock=clock)
    b.deliver_session(sid)  # the due wake: the notice on the floor, the command run


def _state(b: Bus, sid: str) -> str:
    info = b.store.sessions.get_session(sid)
    assert info is not None
    return info.state


def test_a_failed_wake_frees_the_session_at_once_and_the_next_prompt_counts_the_thread_once(
    make_bus: Callable[..., Bus], tmp_path: Path
) -> None:
    b, clock = _bus(make_bus)
    # The harness is not on the worker's PATH: the shell says 127.
    b.open_session("s1", wake_cmd="cat > /dev/null; no-such-harness-here")
    _wake(b, clock, "s1", "first blocker")
    wait_for(lambda: _state(b, "s1") == "idle", 30, what="the failed wake freed it")
    info = b.session("s1")
    assert info.woken_at is None and "exited 127" in (info.wake_error or "")
    [failed] = events(b, "s1", "wake_failed")
    assert "exited 127" in failed["error"]
    [row] = [r for r in b.status()["sessions"] if r["session"] == "s1"]
    assert "exited 127" in row["wake_error"]
    doctor = doctor_report(b.settings.home, ["s1"])
    assert not doctor["ok"]
    assert [p["check"] for p in doctor["problems"]] == ["wake_error"]

    # The person fixes the command; the next blocker wakes at once (not 300 s later).
    out = tmp_path / "prompt.txt"
    b.open_session("s1", wake_cmd=f"cat > {out}")
    _wake(b, clock, "s1", "second blocker")
    wait_for(lambda: out.exists() and "second blocker" in out.read_text(), 30, what="woken")
    prompt = out.read_text()
    # Both notices merged: the thread once, counting both messages.
    assert prompt.count("[inbox ·") == 1 and prompt.count("h:lead") == 1, prompt
    assert "2 new in 1 thread" in prompt and "(2)" in prompt
    # The woken turn's prompt hook says nothing more: both notices are in the prompt.
    assert hooks.start_text(b, "s1", prompt) == ""
    wait_for(lambda: b.session("s1").wake_error is None, 30, what="a wake that worked")
    assert doctor_report(b.settings.home, ["s1"])["ok"]


def test_the_wake_command_runs_with_the_path_its_opener_kept(
    make_bus: Callable[..., Bus], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tools, out = tmp_path / "tools", tmp_path / "woken.txt"
    tools.mkdir()
    harness = tools / "my-harness"
    harness.write_text(f"#!/bin/sh\ncat > {out}\n")
    harness.chmod(0o755)
    b, clock = _bus(make_bus)
    worker_path = os.environ["PATH"]
    # Opened where the harness is on PATH (a terminal, a hook) ...
    monkeypatch.setenv("PATH", f"{tools}:{worker_path}")
    b.open_session("s2", wake_cmd="my-harness")
    # ... woken by a worker whose PATH does not have it.
    monkeypatch.setenv("PATH", worker_path)
    _wake(b, clock, "s2", "blocked")
    wait_for(lambda: out.exists() and "blocked" in out.read_text(), 30, what="the harness ran")
    assert b.session("s2").wake_error is None


def test_a_wake_for_a_session_whose_harness_is_gone_closes_it_and_runs_nothing(
    make_bus: Callable[..., Bus], tmp_path: Path
) -> None:
    out = tmp_path / "woken.txt"
    b, clock = _bus(make_bus)
    b.open_session("s3", wake_cmd=f"cat > {out}")
    window = subprocess.Popen(["sleep", "30"])
    started = psutil.Process(window.pid).create_time()
    kept_wake.keep_holders(b.floor, "s3", [(window.pid, started)])
    window.kill()
    window.wait(30)
    _wake(b, clock, "s3", "anyone there?")
    assert _state(b, "s3") == "closed" and not out.exists()
    assert events(b, "s3", "session_gone")
    # What it was told stays on its floor, for the harness that opens it next.
    assert "anyone there?" in str(b.floor.peek("s3"))


def test_a_wake_for_a_session_whose_harness_lives_runs_the_command(
    make_bus: Callable[..., Bus], tmp_path: Path
) -> None:
    out = tmp_path / "woken.txt"
    b, clock = _bus(make_bus)
    b.open_session("s4", wake_cmd=f"cat > {out}")
    me = psutil.Process()
    kept_wake.keep_holders(b.floor, "s4", [(9_999_999, 1.0), (me.pid, me.create_time())])
    _wake(b, clock, "s4", "hello")
    wait_for(lambda: out.exists() and "hello" in out.read_text(), 30, what="woken")
    assert _state(b, "s4") == "running"


def test_a_re_open_with_a_wake_command_keeps_the_sessions_handle(bus: Bus) -> None:
    bus.open_session("s5", handle="hosta:reviewer")
    bus.open_session("s5", wake_cmd="codex exec resume s5 -")
    info = bus.session("s5")
    assert info.handle == "hosta:reviewer" and info.wake_cmd == "codex exec resume s5 -"
