"""No notice is lost to a dying drain (bus/delivery/heard.py).

A drain is SIGKILLed (INBOX_FAULT, bus/core/faults.py) at each step between claiming the floor
file and recording its marks; afterwards every message is carried by a later notice and
ends ``noticed``. The same for a worker killed, or a drain landing, between the floor
append and ``notice_done``.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from typing import Any

import pytest

from bus.api import Bus
from bus.core.models import now_ms
from bus.core.settings import Settings
from bus.delivery import heard
from bus.delivery.scheduler import sweep_backlogs

SID = "crashy"


def marks(b: Bus) -> dict[str, str]:
    raw = b.store.r.hgetall(b.store.k.s(SID, "msgs"))
    return {k: json.loads(v)["mark"] for k, v in raw.items()}


def notice_ids(lines: list[dict[str, Any]]) -> set[str]:
    return {str(x["id"]) for x in lines if x.get("kind") == "notice"}


def carried(lines: list[dict[str, Any]]) -> set[str]:
    return {m for x in lines if x.get("kind") == "notice" for m in x["notice"]["messages"]}


def in_child(settings: Settings, fault: str, *args: str) -> int:
    env = dict(settings.child_env(), INBOX_FAULT=fault, INBOX_DISPATCHER="none")
    return subprocess.run(
        [sys.executable, *args], env=env, capture_output=True, timeout=60
    ).returncode


@pytest.fixture
def three(bus: Bus) -> list[str]:
    """Three messages to a running session, in one notice on the floor."""
    bus.open_session(SID)
    bus.turn(SID, "start")
    ids = [bus.send({"from": "hosta:peer", "to_id": SID, "text": f"m{i}"})["id"] for i in range(3)]
    bus.deliver_session(SID)
    assert len(notice_ids(bus.floor.peek(SID))) == 1
    return ids


def carry_on(bus: Bus) -> list[dict[str, Any]]:
    """What follows a crash: the harness drains at its next tool step, deliveries look at
    the floor (the scheduler kicks them), the grace passes, the next notice is drained."""
    lines = list(bus.drain(SID))
    bus.deliver_session(SID)
    bus.inbox.sweep_floor(SID, now=now_ms() + heard.GONE_GRACE_MS)
    bus.deliver_session(SID)
    lines += bus.drain(SID)
    return lines


@pytest.mark.parametrize("step", ["drain:after_claim", "drain:after_log", "drain:after_unlink"])
def test_a_drain_killed_at_any_step_loses_no_notice(
    bus: Bus, settings: Settings, three: list[str], step: str
) -> None:
    first = notice_ids(bus.floor.peek(SID))
    assert in_child(settings, step, "-m", "bus", "drain", SID) == -signal.SIGKILL
    assert set(marks(bus).values()) == {"new"}  # nothing was confirmed

    later = carry_on(bus)
    assert set(three) <= carried(later)
    assert set(marks(bus).values()) == {"noticed"}
    if step == "drain:after_unlink":
        # The lines were gone with the dead drainer: a new notice carried them again.
        assert notice_ids(later).isdisjoint(first)
    assert bus.store.r.hlen(bus.store.k.s(SID, "floor")) == 0
    assert bus.floor.peek(SID) == []


def test_a_record_still_on_the_floor_is_never_given_back(bus: Bus, three: list[str]) -> None:
    far = now_ms() + 10 * heard.GONE_GRACE_MS
    assert bus.inbox.sweep_floor(SID, now=far) == 0
    assert bus.inbox.sweep_floor(SID, now=far + heard.GONE_GRACE_MS) == 0
    assert carried(bus.drain(SID)) == set(three)
    assert set(marks(bus).values()) == {"noticed"}


@pytest.mark.parametrize("then", ["drain", "deliver"])
def test_a_worker_killed_between_the_append_and_notice_done(
    bus: Bus, settings: Settings, then: str
) -> None:
    bus.open_session(SID)
    bus.turn(SID, "start")
    ids = [bus.send({"from": "hosta:peer", "to_id": SID, "text": f"m{i}"})["id"] for i in range(2)]
    code = (
        "from bus.api import connect\n"
        "from bus.delivery.dispatch import NullDispatcher\n"
        f"connect(dispatcher=NullDispatcher()).deliver_session({SID!r})\n"
    )
    assert in_child(settings, "notice:after_append", "-c", code) == -signal.SIGKILL
    assert len(notice_ids(bus.floor.peek(SID))) == 1  # written, not recorded
    lines: list[dict[str, Any]] = []
    if then == "deliver":
        bus.deliver_session(SID)  # the next delivery recovers the notice in flight
    lines += bus.drain(SID)
    bus.deliver_session(SID)
    lines += bus.drain(SID)
    assert carried(lines) >= set(ids)
    assert set(marks(bus).values()) == {"noticed"}
    k = bus.store.k
    assert bus.store.r.hlen(k.s(SID, "floor")) == 0 and not bus.store.r.exists(k.s(SID, "notice"))


def test_a_drain_between_the_append_and_notice_done_confirms_the_notice(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    bus.open_session(SID)
    bus.turn(SID, "start")
    sent = bus.send({"from": "hosta:peer", "to_id": SID, "text": "racing"})
    real = bus.floor.write_line
    drained: list[dict[str, Any]] = []

    def deliver_then_drain(sid: str, obj: dict[str, Any], **kw: Any) -> Any:
        out = real(sid, obj, **kw)
        drained.extend(bus.drain(sid))  # the harness drains right after the append
        return out

    monkeypatch.setattr(bus.floor, "write_line", deliver_then_drain)
    bus.deliver_session(SID)
    assert carried(drained) == {sent["id"]}
    assert marks(bus) == {sent["id"]: "noticed"}
    k = bus.store.k
    # No record is left behind that no drain would ever clear.
    assert bus.store.r.hlen(k.s(SID, "floor")) == 0 and not bus.store.r.exists(k.s(SID, "notice"))


def test_the_scheduler_kicks_a_delivery_for_a_notice_due_a_look(bus: Bus, three: list[str]) -> None:
    key = bus.store.k.s(SID, "floor")
    [nid] = bus.store.r.hkeys(key)
    rec = json.loads(bus.store.r.hget(key, nid))
    bus.store.r.delete(bus.store.k.s(SID, "pending"))
    assert sweep_backlogs(bus.delivery) == 0  # just written: nothing to look at yet
    rec["at"] = now_ms() - heard.CHECK_EVERY_MS
    bus.store.r.hset(key, nid, json.dumps(rec))
    calls = list(bus.dispatcher.calls)  # type: ignore[attr-defined]
    # This host's scheduler looks itself: the notice still there, no delivery (no task).
    assert sweep_backlogs(bus.delivery) == 0
    assert bus.dispatcher.calls == calls  # type: ignore[attr-defined]
    # A drainer took it and died: the look marks it gone, the one past the grace gives
    # its messages back, and a delivery carries them.
    bus.floor.session_dir(SID).joinpath("messages.jsonl").unlink()
    assert sweep_backlogs(bus.delivery) == 0
    rec = json.loads(bus.store.r.hget(key, nid))
    bus.store.r.hset(key, nid, json.dumps({**rec, "gone": rec["gone"] - heard.GONE_GRACE_MS}))
    assert sweep_backlogs(bus.delivery) == 1
    assert bus.dispatcher.calls[-1] == ("hosta", SID)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("record", "look"),
    [
        ({"ids": ["a"], "at": 1_000}, False),
        ({"ids": ["a"], "at": 1_000 - heard.CHECK_EVERY_MS}, True),
        ({"ids": ["a"], "at": 1_000 - heard.CHECK_EVERY_MS - 6_000}, False),  # looked at
        ({"ids": ["a"], "at": 1_000, "gone": 1_000}, True),
    ],
)
def test_needs_look(record: Any, look: bool) -> None:
    assert heard.needs_look(json.dumps(record), 1_000) is look
    assert heard.CARRY_AGAIN_BOUND_S <= 30
