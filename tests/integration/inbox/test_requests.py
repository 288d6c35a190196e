"""Typed request threads against real Redis (bus/services/typed_requests.py)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import pytest

from bus.api import Bus
from bus.core import decisions
from bus.core.errors import BadInput, BusError, NotFound, Refused

W1 = {"start": "2030-01-02T10:00:00+00:00", "end": "2030-01-02T11:00:00+00:00"}
W2 = {"start": "2030-01-03T10:00:00+00:00", "end": "2030-01-03T11:00:00+00:00", "tz_hint": "UTC"}


@pytest.fixture
def pair(bus: Bus) -> Bus:
    bus.open_session("alice")
    bus.open_session("bob")
    return bus


def snapshot(b: Bus, thr: str) -> tuple[int, dict[str, str]]:
    """What a refusal must leave untouched: the log's length and the meta hash."""
    r = b.store.r
    return len(b.store.inbox.thread_log(thr)), dict(r.hgetall(b.store.k.t(thr, "meta")))


def open_meeting(b: Bus, **kw: Any) -> str:
    out = b.requests.open_request(
        actor="alice", to_id="bob", type="meeting_request", text="Can we meet?", **kw
    )
    assert out["ok"] and out["state"] == "REQUESTED"
    return str(out["thread"])


def refused(code: str, fn: Callable[[], object]) -> None:
    with pytest.raises(Refused) as err:
        fn()
    assert err.value.code == code


def test_meeting_negotiated_to_confirmed(pair: Bus) -> None:
    b = pair
    thr = open_meeting(b, windows=[W1])
    b.deliver_session("bob")
    assert b.requests.request_state(thr)["windows"] == [W1]
    inbox = b.read("bob", thr)
    assert inbox["state"] == "REQUESTED"
    assert [m["text"] for m in inbox["messages"]] == ["Can we meet?"]

    out = b.requests.decide(
        thr, "counter", actor="bob", message="Not then; how about these?", windows=[W1, W2]
    )
    assert out["new_state"] == "OFFERED" and out["envelope_id"].startswith("env-")
    st = b.requests.request_state(thr)
    assert st["state"] == "OFFERED" and st["offered_by"] == "recipient"
    assert len(st["windows"]) == 2
    # Bob cannot accept his own offer.
    refused("invalid_for_state", lambda: b.requests.decide(thr, "accept", actor="bob"))

    out2 = b.requests.decide(thr, "accept", actor="alice", message="The second one.")
    assert out2["new_state"] == "CONFIRMED"
    assert "offered_by" not in b.requests.request_state(thr)

    b.deliver_session("alice")
    b.deliver_session("bob")
    rows = {t["threadId"]: t for t in b.threads("alice")["threads"]}
    assert rows[thr]["state"] == "CONFIRMED"
    assert {t["threadId"]: t for t in b.threads("bob")["threads"]}[thr]["state"] == "CONFIRMED"
    read = b.read("alice", thr)
    assert read["state"] == "CONFIRMED"
    kinds = [(m["kind"], m["text"]) for m in read["messages"]]
    # Each envelope is in the log once, though its notice was delivered too.
    assert kinds == [
        ("message", "Can we meet?"),
        ("decision", "Not then; how about these?"),
        ("decision", "The second one."),
    ]
    log = b.store.inbox.thread_log(thr)
    env = json.loads(log[1]["m"])
    assert env["decision"] == "counter" and env["new_state"] == "OFFERED"
    assert env["windows"][1]["tz_hint"] == "UTC"
    # The notice reached alice's inbox under the envelope's id, and a decision wakes.
    [rec] = b.store.inbox.records(
        "alice", [out["envelope_id"]]
    )  # kept compact (bus/store/packing.py)
    assert rec["kind"] == "decision" and rec["wakes"] is True
    assert "decided counter" in rec["m"]["text"]


def test_every_refusal_writes_nothing(pair: Bus) -> None:
    b = pair
    b.open_session("carol")
    thr = open_meeting(b)
    b.deliver_session("bob")
    before = snapshot(b, thr)
    refused("not_a_party", lambda: b.requests.decide(thr, "accept", actor="carol"))
    refused("invalid_for_state", lambda: b.requests.decide(thr, "accept", actor="alice"))
    refused("invalid_for_state", lambda: b.requests.decide(thr, "withdraw", actor="bob"))
    assert snapshot(b, thr) == before

    b.requests.decide(thr, "decline", actor="bob")
    done = snapshot(b, thr)
    assert done[1]["state"] == "DECLINED"
    for who, what in [("bob", "accept"), ("alice", "withdraw"), ("alice", "clarify")]:
        refused(
            "thread_terminal", lambda who=who, what=what: b.requests.decide(thr, what, actor=who)
        )
    refused("not_a_party", lambda: b.requests.decide(thr, "clarify", actor="carol"))
    assert snapshot(b, thr) == done


def test_withdraw_only_by_sender_only_from_requested(pair: Bus) -> None:
    b = pair
    thr = open_meeting(b)
    refused("invalid_for_state", lambda: b.requests.decide(thr, "withdraw", actor="bob"))
    assert b.requests.decide(thr, "withdraw", actor="alice")["new_state"] == "DROPPED"

    thr2 = open_meeting(b)
    b.requests.decide(thr2, "counter", actor="bob", windows=[W1])
    before = snapshot(b, thr2)
    refused("invalid_for_state", lambda: b.requests.decide(thr2, "withdraw", actor="alice"))
    assert snapshot(b, thr2) == before


def test_clarify_keeps_state(pair: Bus) -> None:
    b = pair
    thr = b.requests.open_request(actor="alice", to_id="bob", type="task", text="Fix the build")[
        "thread"
    ]
    out = b.requests.decide(thr, "clarify", actor="bob", message="Which branch?")
    assert out["new_state"] == "REQUESTED"
    assert (
        b.requests.decide(thr, "clarify", actor="alice", message="main")["new_state"] == "REQUESTED"
    )
    # A task counter needs no windows.
    assert (
        b.requests.decide(thr, "counter", actor="bob", message="Tomorrow")["new_state"] == "OFFERED"
    )
    assert b.requests.decide(thr, "accept", actor="alice")["new_state"] == "CONFIRMED"


@pytest.mark.parametrize(
    "windows",
    [
        None,
        [],
        [W1] * 11,
        [{"start": "2030-01-02T11:00:00+00:00", "end": "2030-01-02T11:00:00+00:00"}],
        [{"start": "2030-01-02T12:00:00+00:00", "end": "2030-01-02T11:00:00+00:00"}],
        [{"start": "soon", "end": "later"}],
    ],
)
def test_bad_counter_windows_write_nothing(pair: Bus, windows: list[dict[str, str]] | None) -> None:
    b = pair
    thr = open_meeting(b)
    before = snapshot(b, thr)
    with pytest.raises(BadInput):
        b.requests.decide(thr, "counter", actor="bob", windows=windows)
    assert snapshot(b, thr) == before


def test_message_bound_and_bad_input(pair: Bus) -> None:
    b = pair
    thr = open_meeting(b)
    before = snapshot(b, thr)
    with pytest.raises(BadInput):
        b.requests.decide(thr, "decline", actor="bob", message="x" * 2001)
    with pytest.raises(BadInput):
        b.requests.decide(thr, "maybe", actor="bob")
    assert snapshot(b, thr) == before
    assert (
        b.requests.decide(thr, "decline", actor="bob", message="x" * 2000)["new_state"]
        == "DECLINED"
    )
    with pytest.raises(NotFound):
        b.requests.decide("thr_aaaaaaaaaaaaaaaa", "accept", actor="bob")
    with pytest.raises(BadInput):
        b.requests.decide("not-a-thread", "accept", actor="bob")


def test_open_request_refusals(pair: Bus) -> None:
    b = pair
    with pytest.raises(BadInput):
        b.requests.open_request(actor="alice", to_id="bob", type="lunch", text="hi")
    with pytest.raises(BadInput):
        b.requests.open_request(actor="alice", to_id="alice", type="task", text="hi")
    with pytest.raises(NotFound):
        b.requests.open_request(actor="nobody", to_id="bob", type="task", text="hi")
    with pytest.raises(BadInput):
        b.requests.open_request(actor="alice", to_id="bob", type="task", text="x" * 8001)
    with pytest.raises(BadInput):
        b.requests.open_request(
            actor="alice", to_id="bob", type="meeting_request", text="hi", windows=[W1] * 11
        )
    # Nothing was opened by any of them.
    assert b.threads("alice")["threads"] == []
    assert b.store.r.xlen(b.store.k.s("bob", "stream")) == 0


def _act(
    barrier: threading.Barrier, results: dict[str, Any], who: str, what: str, b: Bus, thr: str
) -> None:
    barrier.wait()  # both decisions leave together
    try:
        results[who] = b.requests.decide(thr, what, actor=who)
    except BusError as exc:
        results[who] = exc


def test_race_exactly_one_wins(make_bus: Callable[..., Bus]) -> None:
    setup = make_bus()
    setup.open_session("alice")
    setup.open_session("bob")
    sides = [("bob", "accept", make_bus()), ("alice", "withdraw", make_bus())]
    for _ in range(20):
        thr = open_meeting(setup)
        barrier = threading.Barrier(2)
        results: dict[str, Any] = {}
        workers = [
            threading.Thread(target=_act, args=(barrier, results, *side, thr)) for side in sides
        ]
        for t in workers:
            t.start()
        for t in workers:
            t.join(10)
        wins = [v for v in results.values() if isinstance(v, dict)]
        losses = [v for v in results.values() if isinstance(v, BusError)]
        assert len(wins) == 1 and len(losses) == 1, results
        assert losses[0].code == "thread_terminal"
        state = setup.requests.request_state(thr)["state"]
        assert state == wins[0]["new_state"]
        assert state in (decisions.CONFIRMED, decisions.DROPPED)
        # The log holds the request and exactly one decision.
        entries = setup.store.inbox.thread_log(thr)
        assert len(entries) in (1, 2)
        assert sum(1 for f in entries if json.loads(f["m"]).get("kind") == "decision") == 1
