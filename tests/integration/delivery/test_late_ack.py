"""A line whose ack came after the sender's wait: the sender put it on the file floor
too, and the reference listener had handed it on. The drain does not hand it on again,
yet confirms it; on the real delivery path the agent hears such a notice once."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from bus.api import Bus
from bus.delivery.floor import Floor
from bus.delivery.floor_lines import HEARD, heard_ids, record_heard
from bus.lanes import drain as fast_drain
from bus.surfaces.harness.listener import Listener
from tests.support.waiting import wait_for

SID = "late-ack"


@pytest.fixture
def fl(tmp_path: Path) -> Floor:
    return Floor(tmp_path)  # short: unix socket paths are capped at 104/108 bytes


class SlowHandler:
    """Takes each line, then holds its ack until ``release`` (past the sender's wait)."""

    def __init__(self) -> None:
        self.got: list[dict[str, Any]] = []
        self.release = threading.Event()
        self.done = threading.Event()

    def __call__(self, obj: dict[str, Any]) -> bool:
        self.got.append(obj)
        self.release.wait(10)
        self.done.set()
        return True


def test_a_line_acked_late_is_on_the_file_and_the_drain_skips_it(fl: Floor) -> None:
    slow = SlowHandler()
    with Listener.for_session(fl, SID, slow):
        via, _ = fl.write_line(SID, {"id": "n1", "kind": "notice", "text": "x"}, ack_timeout=0.3)
        assert via == "file" and [o["id"] for o in slow.got] == ["n1"]
        slow.release.set()
        assert slow.done.wait(5)
        wait_for(lambda: "n1" in heard_ids(fl.session_dir(SID)), 5, "the listener's record")
        fl.append(SID, {"id": "m2", "text": "after"})
        result = fl.drain(SID)
    assert [o["id"] for o in result.lines] == ["m2"]
    assert [o["id"] for o in result.heard] == ["n1"]


def test_the_listeners_record_keeps_its_last_ids(fl: Floor) -> None:
    d = fl.session_dir(SID, create=True)
    for i in range(70):
        record_heard(d, [f"ntc-{i:04d}-{'x' * 36}"], keep=10)
    kept = heard_ids(d)
    assert f"ntc-0069-{'x' * 36}" in kept and f"ntc-0000-{'x' * 36}" not in kept
    assert 10 <= len(kept) <= 30
    assert (d / HEARD).stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("lane", ["library", "hooks"])
def test_a_notice_acked_late_is_heard_once_and_its_message_noticed(bus: Bus, lane: str) -> None:
    bus.open_session(SID)
    bus.turn(SID, "start")
    slow = SlowHandler()
    listener = Listener.for_session(bus.floor, SID, slow).start()
    try:
        sent = bus.send({"from": "hosta:me", "to_id": SID, "text": "hello"})
        report = bus.deliver_session(SID)  # the notice's ack wait (1 s) runs out
        [notice] = report.notices
        assert notice["via"] == "file" and [o["id"] for o in slow.got] == [notice["notice"]]
        slow.release.set()
        assert slow.done.wait(5)
        wait_for(lambda: notice["notice"] in heard_ids(bus.floor.session_dir(SID)), 5, "record")
        if lane == "library":
            drained = bus.drain(SID)
        else:  # the hooks' and `inbox drain`'s own lane
            drained = fast_drain.drain(bus.settings, SID, stamped=False)
    finally:
        listener.stop()
    assert drained == []  # heard on the socket: not handed on again
    [record] = bus.store.inbox.records(SID, [sent["id"]])
    assert record["mark"] == "noticed"  # yet confirmed
