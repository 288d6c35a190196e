"""A listener or waiter whose socket path vanished (its session folder removed) binds again
and says so, or stops with an error: never deaf in silence."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from bus.api import Bus
from bus.core.settings import Settings
from bus.delivery.floor import Floor
from bus.surfaces.harness import listener as listener_mod
from bus.surfaces.harness.listener import Listener, run_listener
from tests.support.waiting import wait_for

SID = "gone-1"


def line(i: int) -> dict[str, Any]:
    return {"v": 1, "id": f"m{i}", "ts": 1, "from": "h:peer", "to_id": SID, "text": f"hi {i}"}


@pytest.fixture(autouse=True)
def quick_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(listener_mod, "CHECK_S", 0.05, raising=False)


def test_a_listener_binds_again_when_its_folder_is_removed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fl = Floor(tmp_path)
    got: list[str] = []
    with Listener.for_session(fl, SID, lambda o: got.append(o["id"]) is None) as lis:
        assert fl.write_line(SID, line(1))[0] == "socket"
        shutil.rmtree(fl.session_dir(SID))  # e.g. a clean-up of the inbox folder
        wait_for(lambda: lis.path.exists(), 10, what="the socket bound again")
        assert fl.write_line(SID, line(2))[0] == "socket"
    assert got == ["m1", "m2"]
    assert "vanished (its session folder removed?); listening again" in capsys.readouterr().err


def test_a_listener_that_cannot_bind_again_stops_with_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fl = Floor(tmp_path)
    ready, stop = threading.Event(), threading.Event()
    codes: list[int] = []
    t = threading.Thread(
        target=lambda: codes.append(run_listener(fl, SID, stop=stop, ready=ready)), daemon=True
    )
    t.start()
    assert ready.wait(10)
    d = fl.session_dir(SID)
    shutil.rmtree(d)
    d.write_text("not a folder")  # where the folder was: it cannot be made again
    t.join(10)
    stop.set()
    assert codes == [1]
    err = capsys.readouterr().err
    assert f"inbox listen: {d / 'inbox.sock'} vanished and could not be bound again" in err


def test_a_waiter_binds_again_when_its_folder_is_removed_and_still_hands_a_notice_over(
    bus: Bus, settings: Settings
) -> None:
    bus.open_session(SID)
    code = (
        "import sys\n"
        "from bus.api import connect\n"
        "from bus.surfaces.harness import waiter\n"
        "waiter.CHECK_S = 0.05\n"
        f"sys.exit(waiter.Waiter(connect(), {SID!r}, bound_s=60).run())\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        env={**settings.child_env(), "INBOX_DISPATCHER": "none"},
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        sock = bus.floor.socket_path(SID)
        log = bus.floor.session_dir(SID) / "waiter.log"
        wait_for(lambda: sock.exists() and log.exists(), 30, what="the waiter listening")
        shutil.rmtree(bus.floor.session_dir(SID))
        wait_for(lambda: sock.exists(), 10, what="the waiter's socket bound again")
        notice = {
            **line(1),
            "id": "ntc-1",
            "kind": "notice",
            "notice": {"threads": [], "messages": ["x1"]},
        }
        notice["notice"]["threads"] = [
            {"thread": "t", "label": "t", "count": 1, "senders": ["h:peer"], "newest_at": 1}
            | {"newest_preview": "after the clean-up", "blocker": False}
        ]
        assert bus.floor.write_line(SID, notice)[0] == "socket"
        _out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 2
    assert "vanished (its session folder removed?); listening again" in err
    assert "after the clean-up" in err
    assert "listening again" in log.read_text()
