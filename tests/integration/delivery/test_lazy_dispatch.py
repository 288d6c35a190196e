"""A send asks the host's kick list first; the default dispatcher (Celery) behind it is
made only when no loop of the host is alive, so a process that sends to a live host never
imports Celery (bus.delivery.dispatch.LazyDispatcher)."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from bus.api import Bus
from bus.core.settings import Settings
from bus.delivery.dispatch import LazyDispatcher, RecordingDispatcher, made_now
from bus.delivery.kick_list import ListDispatcher

INBOX = Path(sys.executable).parent / "inbox"


def counted() -> tuple[list[RecordingDispatcher], Callable[[], RecordingDispatcher]]:
    """A factory of recording dispatchers, and the list of those it made."""
    made: list[RecordingDispatcher] = []

    def make() -> RecordingDispatcher:
        made.append(RecordingDispatcher())
        return made[-1]

    return made, make


def test_the_lazy_dispatcher_is_made_once_on_first_use() -> None:
    made, make = counted()
    lazy = LazyDispatcher(make)
    assert made == [] and not lazy.made
    threads = [threading.Thread(target=lazy.request, args=("h", f"s{i}")) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    lazy.request_many("h", ["a", "b"])
    assert len(made) == 1
    assert sorted(made[0].calls) == sorted(
        [("h", f"s{i}") for i in range(8)] + [("h", "a"), ("h", "b")]
    )
    assert lazy.calls is made[0].calls  # its parts read through, as a ListDispatcher's are


def test_a_spare_makes_the_fallback_before_it_takes_over(settings: Settings) -> None:
    """A standby scheduler's warm-up (made_now) makes the lazy fallback under the kick
    list, so its imports are done before the spare is promoted."""
    made, make = counted()
    lazy = LazyDispatcher(make)
    bus = Bus(replace(settings, kick="list"), dispatcher=lazy)
    assert isinstance(bus.dispatcher, ListDispatcher) and made == []
    made_now(bus.dispatcher)
    assert len(made) == 1 and lazy.made
    made_now(bus.dispatcher)
    assert len(made) == 1


def _cold_send(
    settings: Settings, tmp_path: Path, to: str
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``inbox send`` in a process of its own (no command server), its default dispatcher
    one that logs being made and each request."""
    log = tmp_path / "dispatched.txt"
    env = settings.child_env()
    env.update(
        INBOX_FAST_SEND="0",
        INBOX_DISPATCHER="tests.support.kicks:FileDispatcher",
        INBOX_TEST_DISPATCH_LOG=str(log),
    )
    argv = [str(INBOX), "send", "--to-id", to, "--from", "lazy:me", "--text", "hi"]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    return out, log


def test_a_send_to_a_live_host_imports_no_dispatcher(settings: Settings, tmp_path: Path) -> None:
    s = replace(settings, kick="list")
    bus = Bus(s, dispatcher=RecordingDispatcher())
    bus.open_session("lazy-b")
    bus.store.delivery.kick_alive(s.host, 60_000)  # a delivery loop of the host is alive
    out, log = _cold_send(s, tmp_path, "lazy-b")
    assert out.returncode == 0, out.stderr[-2000:]
    assert not log.exists()  # the default dispatcher was never made
    assert bus.store.r.lrange(bus.store.k.kick_list(s.host), 0, -1) == ["lazy-b"]


def test_with_no_loop_alive_a_send_goes_through_the_default_dispatcher(
    settings: Settings, tmp_path: Path
) -> None:
    s = replace(settings, kick="list")
    bus = Bus(s, dispatcher=RecordingDispatcher())
    bus.open_session("lazy-c")
    out, log = _cold_send(s, tmp_path, "lazy-c")
    assert out.returncode == 0, out.stderr[-2000:]
    assert log.read_text().splitlines() == ["made", f"{s.host} lazy-c"]
    assert bus.store.r.llen(bus.store.k.kick_list(s.host)) == 0


def test_a_send_to_a_live_host_imports_no_celery(settings: Settings, tmp_path: Path) -> None:
    """The default dispatcher as installed (Celery's) is not imported by such a send."""
    s = replace(settings, kick="list")
    bus = Bus(s, dispatcher=RecordingDispatcher())
    bus.open_session("lazy-d")
    bus.store.delivery.kick_alive(s.host, 60_000)
    env = {**s.child_env(), "INBOX_FAST_SEND": "0", "PYTHONPROFILEIMPORTTIME": "1"}
    argv = [str(INBOX), "send", "--to-id", "lazy-d", "--from", "lazy:me", "--text", "hi"]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines()}
    assert "bus.api" in imported  # the log is the send's own
    assert not {m for m in imported if m.split(".")[0] in ("celery", "kombu", "workers")}
    assert bus.store.r.lrange(bus.store.k.kick_list(s.host), 0, -1) == ["lazy-d"]


def test_the_scheduler_makes_the_fallback_at_its_start(settings: Settings) -> None:
    """The scheduler (and a promoted spare) makes the kick list's fallback before its first
    due entry, so a wake that finds no live loop does not wait for Celery's import."""
    from bus.delivery.scheduler import run as run_scheduler
    from tests.support.waiting import wait_for

    made, make = counted()
    lazy = LazyDispatcher(make)
    bus = Bus(replace(settings, kick="list"), dispatcher=lazy)
    stop = threading.Event()
    thread = threading.Thread(target=run_scheduler, args=(bus.delivery, stop), daemon=True)
    thread.start()
    try:
        wait_for(lambda: lazy.made, what="the fallback made at the scheduler's start")
    finally:
        stop.set()
        thread.join(15)
    assert len(made) == 1 and made[0].calls == []
