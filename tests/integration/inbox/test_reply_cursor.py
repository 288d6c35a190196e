"""A reply marks read what its session got in the thread, looking only past the thread's
cursor for that session: earlier replies marked the rest, so a long thread costs a reply
no more than a short one, and a mark that failed is tried again by the next reply."""

from __future__ import annotations

from typing import Any

import pytest

from bus.api import Bus
from bus.core.errors import BadInput
from bus.store.keys import reply_cursor_field
from bus.store.redis_errors import StoreFailed


@pytest.fixture
def pair(bus: Bus) -> Bus:
    for sid in ("alice", "bob"):
        bus.open_session(sid)
        bus.turn(sid, "start")
    return bus


def to_bob(b: Bus, text: str, thread: str | None = None) -> dict[str, Any]:
    fields = {"from": "hosta:alice", "from_session": "alice", "to_id": "bob", "text": text}
    if thread:
        fields["thread"] = thread
    sent = b.send(fields)
    b.deliver_session("bob")
    return sent


def state(b: Bus, msg_id: str) -> str:
    return str(b.receipt(msg_id, by="alice")["state"])


def cursor(b: Bus, thread: str) -> str | None:
    raw = b.store.r.hget(b.store.k.t(thread, "meta"), reply_cursor_field("bob"))
    return str(raw) if raw else None


def newest_log_id(b: Bus, thread: str) -> str:
    [(log_id, _fields)] = b.store.r.xrevrange(b.store.k.t(thread, "log"), count=1)
    return str(log_id)


def test_a_reply_marks_what_came_since_the_last_reply_and_moves_the_cursor(pair: Bus) -> None:
    b = pair
    first = to_bob(b, "one")
    thread = str(first["thread"])
    # A one-message thread keeps its message in its record: no log, so no cursor yet.
    assert b.store.inbox.reply_reads("bob", thread)[2:] == ("", [first["id"]])
    b.reply("bob", thread, "seen")
    assert state(b, first["id"]) == "read" and cursor(b, thread) is None
    b.deliver_session("alice")  # bob's reply joins the log

    later = [to_bob(b, f"more {i}", thread)["id"] for i in range(3)]
    assert [state(b, i) for i in later] == ["stored"] * 3
    b.reply("bob", thread, "all of it")
    assert [state(b, i) for i in later] == ["read"] * 3
    # The cursor is the newest log entry the reply read: the third message to bob.
    assert cursor(b, thread) == newest_log_id(b, thread)
    b.deliver_session("alice")

    # Only what came after is looked at by the next reply.
    last = to_bob(b, "last", thread)["id"]
    *_reads, past = b.store.inbox.reply_reads("bob", thread)
    assert last in past and not set(later) & set(past) and first["id"] not in past
    assert len(past) == 2  # bob's own reply, delivered after the cursor, and the new one
    b.reply("bob", thread, "and that")
    assert state(b, last) == "read"


def test_a_mark_that_failed_is_tried_again_by_the_next_reply(
    pair: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    b = pair
    thread = str(to_bob(b, "one")["thread"])
    ids = [to_bob(b, f"more {i}", thread)["id"] for i in range(2)]
    real = b.store.receipts.mark_receipts

    def down(*args: Any, **kwargs: Any) -> None:
        raise StoreFailed("Redis did not answer")

    monkeypatch.setattr(b.store.receipts, "mark_receipts", down)
    with pytest.raises(StoreFailed):
        b.reply("bob", thread, "lost?")
    assert cursor(b, thread) is None  # not moved past what was never stamped
    monkeypatch.setattr(b.store.receipts, "mark_receipts", real)
    b.reply("bob", thread, "again")
    assert [state(b, i) for i in ids] == ["read", "read"]


@pytest.mark.parametrize("sid", ["", "a b", "../x", "x}y", "a" * 181])
def test_a_bad_session_id_never_becomes_a_cursor_field(sid: str) -> None:
    with pytest.raises(BadInput):
        reply_cursor_field(sid)
