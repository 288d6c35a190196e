"""The background waiter (``inbox hook claude wait``) as installed, against a real worker and
scheduler: run the way Claude Code runs an ``asyncRewake`` hook, from a bare environment."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from bus.api import Bus
from bus.core.errors import Unavailable
from bus.core.settings import Settings
from bus.ops.embedded import EmbeddedRedis
from tests.support.celery_bus import Scheduler, celery_bus, events, marks
from tests.support.harness_support import install_hooks
from tests.support.local_servers import free_port
from tests.support.waiting import wait_for
from tests.support.worker_proc import WorkerProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
AGENT = "claude-code_2-1-332_harness"
BURST = 300


@contextlib.contextmanager
def running(
    s: Settings, start_worker: Callable[..., WorkerProcess], folder: Path
) -> Iterator[tuple[Bus, dict[str, str], WorkerProcess]]:
    """The hooks installed under ``folder`` as a person installs them, a worker and the
    scheduler on ``s``: (a bus, each event's hook command and the waiter's, the worker)."""
    path = folder / "project" / ".claude" / "settings.json"
    path.parent.mkdir(parents=True)
    install_hooks("claude", path, s)
    hooks = json.loads(path.read_text())["hooks"]
    commands = {e: g[0]["hooks"][0]["command"] for e, g in hooks.items()}
    commands["wait"] = hooks["Stop"][0]["hooks"][1]["command"]
    worker = start_worker(s)
    scheduler = Scheduler(s)
    try:
        yield celery_bus(s), commands, worker
    finally:
        scheduler.stop()


@pytest.fixture
def live(
    settings: Settings, start_worker: Callable[..., WorkerProcess], tmp_path: Path
) -> Iterator[tuple[Bus, dict[str, str]]]:
    s = replace(settings, wake_debounce_s=0.5, fyi_flush_s=600.0)
    with running(s, start_worker, tmp_path) as (bus, commands, _worker):
        yield bus, commands


def assert_heard(bus: Bus, sid: str, nid: str) -> None:
    """``nid`` is marked heard. The waiter's ack is its last act before it exits, and the
    worker records it after that, so the mark is awaited (bounded), not read at once."""
    wait_for(lambda: marks(bus, sid).get(nid) == "noticed", 60, what=f"{nid} marked heard")


def run(command: str, sid: str, event: str, **extra: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["env", "-i", "PATH=/usr/bin:/bin", f"AI_AGENT={AGENT}", "sh", "-c", command],
        input=json.dumps({"session_id": sid, "hook_event_name": event, **extra}),
        capture_output=True,
        text=True,
        timeout=120,
    )


def arm(command: str, sid: str) -> subprocess.Popen[str]:
    """The waiter started the way Claude Code starts it at a turn's end, in the background."""
    with tempfile.TemporaryFile("w+") as payload:
        payload.write(json.dumps({"session_id": sid, "hook_event_name": "Stop"}))
        payload.seek(0)
        return subprocess.Popen(
            ["env", "-i", "PATH=/usr/bin:/bin", f"AI_AGENT={AGENT}", "sh", "-c", command],
            stdin=payload,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


def listening(bus: Bus, sid: str) -> bool:
    log = bus.floor.session_dir(sid) / "waiter.log"
    return (bus.floor.session_dir(sid) / "inbox.sock").exists() and log.exists()


def test_a_blocker_wakes_the_waiter_an_fyi_does_not(live: tuple[Bus, dict[str, str]]) -> None:
    bus, commands = live
    sid = str(uuid.uuid4())
    assert run(commands["SessionStart"], sid, "SessionStart", source="startup").returncode == 0
    waiter = arm(commands["wait"], sid)
    try:
        wait_for(lambda: listening(bus, sid), 60, what="the waiter listening")
        bus.send({"from": "hostb:peer", "to_id": sid, "text": "fyi only", "class": "fyi"})
        with pytest.raises(subprocess.TimeoutExpired):
            waiter.wait(timeout=3)  # well past the debounce: the FYI waits for the flush
        sent = bus.send({"from": "hostb:lead", "to_id": sid, "text": "blocked", "class": "blocker"})
        _out, err = waiter.communicate(timeout=60)
        assert waiter.returncode == 2
        assert err.startswith("[inbox · 2 new in 2 threads") and "blocked" in err
        # Handed over by exit 2: heard, as a socket ack.
        assert_heard(bus, sid, sent["id"])
        assert bus.session(sid).state == "running"
    finally:
        if waiter.poll() is None:
            waiter.kill()


def test_a_session_whose_floor_path_is_over_200_bytes_is_woken_through_its_short_link(
    settings: Settings, start_worker: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    # A deep INBOX_HOME with a UUID session id: the socket's own path is past what a unix
    # socket address holds (108 bytes), so the waiter binds and the worker connects
    # through the short per-user link to the session's folder.
    deep = settings.home / ("d" * 100) / ("e" * 60)
    s = replace(settings, home=deep, wake_debounce_s=0.5, fyi_flush_s=600.0)
    with running(s, start_worker, tmp_path) as (bus, commands, _worker):
        sid = str(uuid.uuid4())
        assert len(str(bus.floor.socket_path(sid)).encode()) > 200
        assert run(commands["SessionStart"], sid, "SessionStart", source="startup").returncode == 0
        waiter = arm(commands["wait"], sid)
        try:
            wait_for(lambda: listening(bus, sid), 60, what="the waiter listening")
            assert " listening" in _log(bus, sid)
            sent = bus.send(
                {"from": "hostb:lead", "to_id": sid, "text": "deep", "class": "blocker"}
            )
            _out, err = waiter.communicate(timeout=60)
            assert waiter.returncode == 2 and "deep" in err
            assert_heard(bus, sid, sent["id"])
        finally:
            if waiter.poll() is None:
                waiter.kill()


def test_a_newer_waiter_or_a_turn_start_stops_it_quietly_and_a_killed_one_loses_nothing(
    live: tuple[Bus, dict[str, str]],
) -> None:
    bus, commands = live
    sid = str(uuid.uuid4())
    assert run(commands["SessionStart"], sid, "SessionStart", source="startup").returncode == 0
    first = arm(commands["wait"], sid)
    wait_for(lambda: listening(bus, sid), 60, what="the first waiter listening")
    second = arm(commands["wait"], sid)
    _out, err = first.communicate(timeout=60)
    assert first.returncode == 0 and err == ""  # superseded, quietly
    wait_for(lambda: _log(bus, sid).count(" listening") == 2, 60, what="the second")
    done = run(commands["UserPromptSubmit"], sid, "UserPromptSubmit", prompt="hi")
    assert done.returncode == 0
    second.communicate(timeout=60)
    assert second.returncode == 0  # a turn started
    assert run(commands["Stop"], sid, "Stop", last_assistant_message="ok").returncode == 0

    third = arm(commands["wait"], sid)
    wait_for(lambda: _log(bus, sid).count(" listening") == 3, 60, what="the third")
    third.send_signal(signal.SIGKILL)  # killed before any hand-over
    third.communicate(timeout=60)
    sent = bus.send(
        {"from": "hostb:lead", "to_id": sid, "text": "still there?", "class": "blocker"}
    )
    wait_for(
        lambda: any(x.get("kind") == "notice" for x in bus.floor.peek(sid)),
        60,
        what="the notice on the file floor",
    )
    assert marks(bus, sid)[sent["id"]] == "new"  # not heard: nothing marked
    start = run(commands["UserPromptSubmit"], sid, "UserPromptSubmit", prompt="next")
    assert "still there?" in start.stdout  # the next turn hears it


def test_a_burst_of_300_blockers_to_an_idle_session_is_one_wake_with_one_notice(
    settings: Settings, start_worker: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    # A burst is what lands inside the debounce; 300 sends take about a second here.
    s = replace(settings, wake_debounce_s=4.0, fyi_flush_s=600.0)
    with running(s, start_worker, tmp_path) as (bus, commands, _worker):
        sid = str(uuid.uuid4())
        assert run(commands["SessionStart"], sid, "SessionStart", source="startup").returncode == 0
        waiter = arm(commands["wait"], sid)
        again: subprocess.Popen[str] | None = None
        try:
            wait_for(lambda: listening(bus, sid), 60, what="the waiter listening")
            began = time.monotonic()
            ids = [
                bus.send(
                    {
                        "from": f"hostb:lane{n % 7}",
                        "to_id": sid,
                        "text": f"b{n}",
                        "class": "blocker",
                    }
                )["id"]
                for n in range(BURST)
            ]
            took = time.monotonic() - began
            assert took < s.wake_debounce_s, f"the burst took {took:.1f} s, past the debounce"
            _out, err = waiter.communicate(timeout=60)
            assert waiter.returncode == 2
            assert err.startswith(f"[inbox · {BURST} new in 7 threads"), err[:200]
            # Heard exactly once: one notice carried every message, each once. The ack is
            # the waiter's last act; the worker records it after the waiter has gone.
            wait_for(lambda: events(bus, sid, "inbox_noticed"), 60, what="the ack recorded")
            heard = events(bus, sid, "inbox_noticed")
            assert len(heard) == 1
            assert sorted(json.loads(heard[0]["ids"])) == sorted(ids)
            assert marks(bus, sid) == dict.fromkeys(ids, "noticed")
            assert len(events(bus, sid, "wake")) == 1

            # The woken turn ends and the next waiter arms: nothing is left to wake it.
            done = run(commands["Stop"], sid, "Stop", last_assistant_message="on it")
            assert done.returncode == 0
            again = arm(commands["wait"], sid)
            wait_for(lambda: _log(bus, sid).count(" listening") == 2, 60, what="the next waiter")
            assert bus.store.schedule.next_due() is None  # no wake on the schedule
            with pytest.raises(subprocess.TimeoutExpired):
                again.wait(timeout=s.wake_debounce_s + 2)  # past a debounce: no second wake
            assert len(events(bus, sid, "wake")) == 1
            assert bus.floor.peek(sid) == []
        finally:
            for proc in (waiter, again):
                if proc is not None and proc.poll() is None:
                    proc.kill()
                    proc.communicate(timeout=30)


def test_an_armed_waiter_survives_a_redis_restart_and_a_blocker_still_wakes_it(
    settings: Settings, start_worker: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    # A server of the test's own (the suite's is shared), restarted while the waiter waits.
    server = EmbeddedRedis(tmp_path / "r.sock", tmp_path / "rdata", port=free_port()).start()
    url = f"redis://:{server.password}@127.0.0.1:{server.port}/0"
    s = replace(
        settings,
        redis_url=url,
        broker_url=url,
        redis_cluster=False,  # the server of its own is standalone (also in a cluster run)
        wake_debounce_s=0.5,
        fyi_flush_s=600.0,
    )
    try:
        with running(s, start_worker, tmp_path) as (bus, commands, worker):
            sid = str(uuid.uuid4())
            opened = run(commands["SessionStart"], sid, "SessionStart", source="startup")
            assert opened.returncode == 0, opened.stderr
            waiter = arm(commands["wait"], sid)
            try:
                wait_for(lambda: listening(bus, sid), 60, what="the waiter listening")
                server.stop()  # graceful: the data is kept
                server.start()
                back = time.monotonic()
                sent = None
                while sent is None:  # the first command on a dropped connection may fail
                    try:
                        sent = bus.send(
                            {
                                "from": "hostb:lead",
                                "to_id": sid,
                                "text": "still blocked",
                                "class": "blocker",
                            }
                        )
                    except Unavailable:
                        assert time.monotonic() - back < 30, "Redis never came back"
                _out, err = waiter.communicate(timeout=60)
                assert waiter.returncode == 2, err
                assert "still blocked" in err
                assert_heard(bus, sid, sent["id"])
                assert worker.proc.poll() is None  # the same worker carried on
            finally:
                if waiter.poll() is None:
                    waiter.kill()
                    waiter.communicate(timeout=30)
    finally:
        server.stop()


def _log(bus: Bus, sid: str) -> str:
    path = bus.floor.session_dir(sid) / "waiter.log"
    return path.read_text() if path.exists() else ""
