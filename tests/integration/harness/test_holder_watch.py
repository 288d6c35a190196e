"""A session's life follows its harness's: the host's worker closes a session whose kept
holders (bus.delivery.kept_wake) all ended, without a wake; its look costs no Redis
while they live."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import psutil
import pytest
import redis

from bus.api import Bus
from bus.core.models import SessionInfo
from bus.core.settings import Settings
from bus.delivery import kept_wake
from bus.delivery.holder_watch import HolderWatch, verdict
from bus.surfaces.harness import codex_wake
from bus.surfaces.harness.hooks_codex import run_codex_hook
from tests.support.celery_bus import events
from tests.support.waiting import wait_for
from tests.support.worker_proc import WorkerProcess


def _info(state: str = "idle", host: str = "hosta", seen: int = 100) -> SessionInfo:
    return SessionInfo.model_validate(
        {"session": "s", "handle": "h", "host": host, "state": state, "last_seen": seen}
    )


@pytest.mark.parametrize(
    ("info", "want"),
    [
        (None, "settled"),  # no record: nothing to close
        (_info(state="closed"), "settled"),
        (_info(host="hostb"), "settled"),  # another host's: its worker judges it
        (_info(seen=500), "later"),  # seen since the look began: a new window opened it
        (_info(), "close"),
        (_info(state="running"), "close"),  # a turn nobody watches
    ],
)
def test_verdict(info: SessionInfo | None, want: str) -> None:
    assert verdict(info, "hosta", looked_at=200) == want


@pytest.fixture
def window() -> Iterator[subprocess.Popen[bytes]]:
    """A fake harness window: a process whose life is a session's."""
    proc = subprocess.Popen(["sleep", "120"])
    yield proc
    proc.kill()
    proc.wait(30)


def _hold(b: Bus, sid: str, proc: subprocess.Popen[bytes]) -> None:
    kept_wake.keep_holders(b.floor, sid, [(proc.pid, psutil.Process(proc.pid).create_time())])


def test_the_look_reads_no_record_while_a_holder_lives_and_one_once_they_ended(
    bus: Bus, window: subprocess.Popen[bytes]
) -> None:
    bus.open_session("w1")
    _hold(bus, "w1", window)
    reads: list[str] = []

    def read(sid: str) -> SessionInfo | None:
        reads.append(sid)
        return bus.store.sessions.get_session(sid)

    watch = HolderWatch(bus.floor, "hosta", bus.inbox.notices.close_gone, read)
    assert watch.check() == [] and watch.check() == [] and reads == []
    window.kill()
    window.wait(30)
    assert watch.check() == ["w1"] and reads == ["w1"]
    assert watch.check() == [] and reads == ["w1"]  # closed: not read again


def test_the_worker_closes_a_session_whose_window_quit_without_a_wake(
    settings: Settings,
    make_bus: Callable[..., Bus],
    start_worker: Callable[..., WorkerProcess],
    window: subprocess.Popen[bytes],
) -> None:
    b = make_bus()
    b.open_session("quit", wake_cmd="true")
    b.open_session("open", wake_cmd="true")
    _hold(b, "quit", window)
    me = psutil.Process()
    kept_wake.keep_holders(b.floor, "open", [(me.pid, me.create_time())])
    start_worker(settings)
    assert b.session("quit").state == "idle"
    window.kill()
    window.wait(30)

    def state(sid: str) -> str:
        rows = {r["session"]: r for r in b.status()["sessions"]}
        return str(rows[sid]["state"])

    wait_for(lambda: state("quit") == "closed", 30, what="the quit window's session closed")
    assert events(b, "quit", "session_gone")
    assert state("open") == "idle" and not events(b, "open", "session_gone")


def test_a_look_the_store_did_not_answer_is_tried_again_at_the_next(
    bus: Bus, window: subprocess.Popen[bytes]
) -> None:
    bus.open_session("w2")
    _hold(bus, "w2", window)
    window.kill()
    window.wait(30)
    calls: list[str] = []

    def read(sid: str) -> SessionInfo | None:
        calls.append(sid)
        if len(calls) == 1:
            raise redis.exceptions.ConnectionError("Redis away")
        return bus.store.sessions.get_session(sid)

    watch = HolderWatch(bus.floor, "hosta", bus.inbox.notices.close_gone, read)
    assert watch.check() == [] and bus.session("w2").state == "idle"
    assert watch.check() == ["w2"] and bus.session("w2").state == "closed"


def test_a_look_right_after_a_new_windows_open_keeps_the_session_open(
    bus: Bus, window: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The session's first window quit; no look saw it yet. A new window resumes it, and
    # the worker's look comes just after the SessionStart hook's open.
    sid = "019a0000-0000-7000-8000-000000000001"
    bus.open_session(sid)
    _hold(bus, sid, window)
    window.kill()
    window.wait(30)
    me = psutil.Process()
    new = codex_wake.Plan("true", holders=[(me.pid, me.create_time())])
    monkeypatch.setattr(codex_wake, "plan", lambda *a, **k: new)
    watch = HolderWatch.of(bus.inbox.notices)
    opened = bus.open_session
    looked: list[list[str]] = []

    def open_then_look(*args: Any, **kw: Any) -> Any:
        answer = opened(*args, **kw)
        looked.append(watch.check())
        return answer

    monkeypatch.setattr(bus, "open_session", open_then_look)
    run_codex_hook("SessionStart", {"session_id": sid, "source": "resume"}, bus)
    assert looked == [[]] and bus.session(sid).state == "idle"
    assert watch.check() == [] and not events(bus, sid, "session_gone")
