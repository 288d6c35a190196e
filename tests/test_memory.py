"""What an idle session keeps in Redis (issue 13, memory): counts, not timings.

An idle session here is one that was registered and had one message delivered and noticed
(bench/swarm.py's memory row)."""

from __future__ import annotations

from typing import Any

import pytest

from bus.api import Bus
from bus.errors import Refused
from bus.watch import top_rows


def send(b: Bus, to: str, text: str) -> dict[str, Any]:
    return b.send({"from": "ha:lane", "to_id": to, "text": text, "class": "action"})


def test_a_delivered_queue_is_emptied_and_keeps_its_last_id(bus: Bus) -> None:
    bus.open_session("coord")
    bus.turn("coord", "start")
    first = send(bus, "coord", "hello")
    bus.deliver_session("coord")
    bus.drain("coord")
    store, key = bus.store, bus.store.k.s("coord", "stream")
    cursor = store.cursor("coord")
    # The delivery took the whole queue: no entry (so no stream node) is left ...
    assert store.r.xlen(key) == 0
    assert store.backlog("coord") == 0
    # ... but the stream stays, with its last id: the next entry still sorts after the cursor.
    assert store.r.exists(key) == 1
    assert str(store.r.xinfo_stream(key)["last-generated-id"]) == cursor
    # The message lives on in the inbox, the top row still dates the last arrival.
    assert store.records("coord", [first["id"]])[0]["mark"] == "noticed"
    row = next(r for r in top_rows(bus) if r["session"] == "coord")
    assert row["last_at"] >= int(cursor.split("-")[0])

    second = send(bus, "coord", "again")
    assert store.backlog("coord") == 1
    assert [f["id"] for _e, f in store.read_after("coord", cursor)] == [second["id"]]
    # A resend of the first (its entry gone) is still answered from the ids, not stored.
    again = bus.send({"from": "ha:lane", "to_id": "coord", "text": "hello", "id": first["id"]})
    assert again["id"] == first["id"] and store.backlog("coord") == 1
    # A trim now (as after a delivery that raced this send) keeps the entry not yet taken.
    store.set_trim_floor("coord", bus.settings.stream_keep)
    assert [f["id"] for _e, f in store.read_after("coord", cursor)] == [second["id"]]
    bus.deliver_session("coord")
    assert store.r.xlen(key) == 0
    assert [r["m"]["id"] for r in store.records("coord", [second["id"]])] == [second["id"]]


def test_a_message_withdrawn_before_its_delivery_stays_withdrawn_once_the_queue_is_empty(
    bus: Bus,
) -> None:
    bus.open_session("me")
    bus.open_session("lane")
    sent = bus.send({"from": "hosta:me", "from_session": "me", "to_id": "lane", "text": "oops"})
    assert bus.withdraw(sent["id"], by="me")["state"] == "unsent"
    bus.deliver_session("lane")  # skips it, then empties the queue
    assert bus.store.r.xlen(bus.store.k.s("lane", "stream")) == 0
    with pytest.raises(Refused):
        bus.withdraw(sent["id"], by="someone-else")
    assert bus.withdraw(sent["id"], by="me")["state"] == "withdrawn"
