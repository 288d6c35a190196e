"""A reply, a withdraw and a decision read what they need first in one round trip
(bus.store.conversations): a count of round trips (not a timing)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from bus.api import Bus
from tests.support.trips import RoundTrips


@pytest.fixture
def bus(make_bus: Callable[..., Bus]) -> Bus:
    b = make_bus()
    if b.store.cluster:
        pytest.skip("counts round trips of a standalone server (a cluster splits them)")
    for sid in ("alice", "bob"):
        b.open_session(sid)
    return b


def test_a_reply_reads_its_session_the_parties_and_the_tail_in_one_round_trip(
    bus: Bus,
    trips: RoundTrips,
) -> None:
    sent = bus.send({"from": "hosta:alice", "from_session": "alice", "to_id": "bob", "text": "hi"})
    bus.deliver_session("bob")
    trips.rounds.clear()
    answer = bus.reply("bob", sent["thread"], "thanks")
    assert answer["ok"] and answer["to"] == ["alice"]
    reads = next(trip for trip in trips.rounds if "HGETALL" in trip)
    assert {"HGET", "EVALSHA"} <= set(reads), trips.rounds  # the parties, thread_tail.lua
    # the sender's rate, the reads, the receiver's record, the append, the read marks,
    # the reply cursor
    assert len(trips.rounds) <= 6, trips.rounds
    # what the tail named is marked read: the message bob got
    assert bus.receipt(sent["id"], by="alice")["state"] == "read"


def test_a_withdraw_reads_the_answer_the_record_and_the_cursor_in_one_round_trip(
    bus: Bus,
    trips: RoundTrips,
) -> None:
    sent = bus.send({"from": "hosta:alice", "from_session": "alice", "to_id": "bob", "text": "hi"})
    trips.rounds.clear()
    assert bus.withdraw(sent["id"], by="alice")["state"] == "unsent"
    assert any({"HGET", "XREVRANGE"} <= set(trip) for trip in trips.rounds), trips.rounds
    # the recipient's index, the reads, withdraw.lua, the receipt's mark: the sender's
    # session is read from the receipt kept beside the answer, not from the queue
    assert len(trips.rounds) <= 4, trips.rounds
    assert not any("XRANGE" in trip for trip in trips.rounds), trips.rounds


def test_a_decision_reads_its_actor_and_the_thread_in_one_round_trip(
    bus: Bus,
    trips: RoundTrips,
) -> None:
    req = bus.request("bob", "task", "do it", actor="alice")
    trips.rounds.clear()
    assert bus.decide(req["thread"], "accept", actor="bob")["new_state"] == "CONFIRMED"
    assert trips.rounds[0] == ["HGETALL", "HGETALL"], trips.rounds  # the actor's, the thread's
