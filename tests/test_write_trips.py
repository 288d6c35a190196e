"""A reply, a withdraw and a decision read what they need first in one round trip (bus.store.conversations):
a count of round trips (not a timing), as the write commands' warm start serves them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis.connection

from bus.api import Bus


class Trips:
    """The commands of each round trip this process sends to Redis, in order."""

    def __init__(self) -> None:
        self.sent: list[list[str]] = []

    def record(self, command: Any) -> None:
        chunks = command if isinstance(command, list) else [command]
        parts = b"".join(bytes(c) for c in chunks).split(b"\r\n")
        names = []
        for i, part in enumerate(parts):
            if part.startswith(b"*") and i + 2 < len(parts) and parts[i + 1].startswith(b"$"):
                names.append(parts[i + 2].upper().decode(errors="replace"))
        self.sent.append(names)


@pytest.fixture
def trips(monkeypatch: pytest.MonkeyPatch) -> Iterator[Trips]:
    t = Trips()
    real = redis.connection.AbstractConnection.send_packed_command

    def counting(self: Any, command: Any, check_health: bool = True) -> None:
        t.record(command)
        real(self, command, check_health)

    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counting)
    yield t


@pytest.fixture
def bus(make_bus: Callable[..., Bus]) -> Bus:
    b = make_bus()
    if b.store.cluster:
        pytest.skip("counts round trips of a standalone server (a cluster splits them)")
    for sid in ("alice", "bob"):
        b.open_session(sid)
    return b


def test_a_reply_reads_its_session_the_parties_and_the_tail_in_one_round_trip(
    bus: Bus, trips: Trips
) -> None:
    sent = bus.send({"from": "hosta:alice", "from_session": "alice", "to_id": "bob", "text": "hi"})
    bus.deliver_session("bob")
    trips.sent.clear()
    answer = bus.reply("bob", sent["thread"], "thanks")
    assert answer["ok"] and answer["to"] == ["alice"]
    reads = next(trip for trip in trips.sent if "HGETALL" in trip)
    assert {"HGET", "EVALSHA"} <= set(reads), trips.sent  # the parties, thread_tail.lua
    # the sender's rate, the reads, the receiver's record, the append, the read marks,
    # the reply cursor
    assert len(trips.sent) <= 6, trips.sent
    # what the tail named is marked read: the message bob got
    assert bus.receipt(sent["id"], by="alice")["state"] == "read"


def test_a_withdraw_reads_the_answer_the_record_and_the_cursor_in_one_round_trip(
    bus: Bus, trips: Trips
) -> None:
    sent = bus.send({"from": "hosta:alice", "from_session": "alice", "to_id": "bob", "text": "hi"})
    trips.sent.clear()
    assert bus.withdraw(sent["id"], by="alice")["state"] == "unsent"
    assert any({"HGET", "XREVRANGE"} <= set(trip) for trip in trips.sent), trips.sent
    # the recipient's index, the reads, withdraw.lua, the receipt's mark: the sender's
    # session is read from the receipt kept beside the answer, not from the queue
    assert len(trips.sent) <= 4, trips.sent
    assert not any("XRANGE" in trip for trip in trips.sent), trips.sent


def test_a_decision_reads_its_actor_and_the_thread_in_one_round_trip(
    bus: Bus, trips: Trips
) -> None:
    req = bus.request("bob", "task", "do it", actor="alice")
    trips.sent.clear()
    assert bus.decide(req["thread"], "accept", actor="bob")["new_state"] == "CONFIRMED"
    assert trips.sent[0] == ["HGETALL", "HGETALL"], trips.sent  # the actor's, the thread's
