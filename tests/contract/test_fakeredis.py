"""fakeredis's role, as the README says: a user's own tests of coordinator code may run
the Python API on ``fakeredis.FakeRedis`` (with ``fakeredis[lua]``: the store's writes are
Lua scripts), no server, no workers; delivery is called by the test."""

from __future__ import annotations

from pathlib import Path

import fakeredis

from bus.api import Bus
from bus.core.settings import Settings
from bus.delivery.dispatch import NullDispatcher


def test_a_coordinator_test_runs_the_api_on_fakeredis(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, host="test", key_prefix="t")
    bus = Bus(
        settings, client=fakeredis.FakeRedis(decode_responses=True), dispatcher=NullDispatcher()
    )
    bus.open_session("lead")
    bus.open_session("dev")
    sent = bus.send(
        {"to_id": "dev", "from_session": "lead", "from": "test:lead", "text": "take #12"}
    )
    assert sent["ok"] and sent["state"] == "stored"
    report = bus.deliver_session("dev")  # what a worker would do
    assert report.inbox == 1 and not report.errors
    (thread,) = bus.threads("dev")["threads"]
    assert thread["unread"] == 1 and thread["from"] == ["test:lead"]
    view = bus.read("dev", thread["threadId"])
    assert [m["text"] for m in view["messages"]] == ["take #12"]
