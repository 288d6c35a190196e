"""A send answer kept compact in ``ids`` (bus/store/packing.py): smaller, and every resend still
gets the first answer, the same bytes in the same order."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bus.api import Bus
from bus.core.models import Recipient, SendAnswer
from bus.core.threads import thread_of
from bus.delivery.report import DeliveryReport
from bus.store import packing

RCPT = {"session": "s1", "host": "h", "state": "running", "listening": False, "last_seen": 17}
KEEP_TABLE: list[tuple[str, dict[str, Any], str]] = [
    (
        "stored",
        {"ok": True, "id": "m1", "thread": "thr_a", "state": "stored", "recipient": RCPT,
         "duplicate": False},
        '{"thread":"thr_a","state":"stored","recipient":{"host":"h","state":"running",'
        '"listening":false,"last_seen":17}}',
    ),
    (
        "answered",
        {"ok": True, "id": "m1", "thread": "thr_a", "state": "answered", "recipient": RCPT,
         "answer": "done", "duplicate": False},
        '{"thread":"thr_a","state":"answered","recipient":{"host":"h","state":"running",'
        '"listening":false,"last_seen":17},"answer":"done"}',
    ),
    (
        "another id and session stay",
        {"ok": False, "id": "m2", "state": "bounced", "recipient": {**RCPT, "session": "s9"},
         "reason": "r", "duplicate": True},
        '{"ok":false,"id":"m2","state":"bounced","recipient":{"session":"s9","host":"h",'
        '"state":"running","listening":false,"last_seen":17},"reason":"r","duplicate":true}',
    ),
]  # fmt: skip


@pytest.mark.parametrize(("name", "answer", "stored"), KEEP_TABLE, ids=[r[0] for r in KEEP_TABLE])
def test_an_answer_is_kept_without_what_its_place_says_and_restored_whole(
    name: str, answer: dict[str, Any], stored: str
) -> None:
    assert packing.keep(answer, "s1", "m1") == stored
    back = packing.restore(stored, "s1", "m1")
    assert json.dumps(back) == json.dumps(answer)  # the same fields, in the same order
    # Re-encoded in another order (cjson) it restores too.
    shuffled = json.dumps(dict(reversed(list(json.loads(stored).items()))))
    assert json.dumps(packing.restore(shuffled, "s1", "m1")) == json.dumps(answer)


def test_the_field_order_is_send_answers() -> None:
    assert (*packing.ANSWER_FIELDS, "duplicate", "durable") == tuple(SendAnswer.model_fields)
    # host_state is read live with each send, never kept with the answer.
    assert tuple(Recipient.model_fields) == (*packing.RECIPIENT_FIELDS, "host_state")


def without(d: dict[str, Any], *names: str) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k not in names}


def test_a_resend_gets_the_first_answer_byte_for_byte_from_the_compact_form(bus: Bus) -> None:
    bus.open_session("s1")
    bus.turn("s1", "start")
    ids = bus.store.k.s("s1", "ids")
    one = bus.send({"id": "one", "from": "neo:a", "to_id": "s1", "text": "hi"})
    # The single send says whether the host is up (read live, kept nowhere): no worker here.
    assert one["recipient"].pop("host_state") == "unseen"
    [many] = bus.send_many([{"id": "many", "from": "neo:b", "to_id": "s1", "text": "yo"}])
    assert many["recipient"].pop("host_state") == "unseen"  # a batch's answer says it too
    for first, sender in ((one, "neo:a"), (many, "neo:b")):
        raw = bus.store.r.hget(ids, first["id"])
        # Kept without the id, the session, ok and duplicate, and without spaces.
        assert '"id"' not in raw and '"session"' not in raw and " " not in raw
        assert len(raw) < len(json.dumps(first)) - 60
        again = {**first, "duplicate": True}
        # Its sender's resends (an id is its sender's: another's is refused id_taken).
        single = bus.send({"id": first["id"], "from": sender, "to_id": "s1", "text": "hi"})
        assert single["recipient"].pop("host_state") == "unseen"
        [batch] = bus.send_many([{"id": first["id"], "from": sender, "to_id": "s1", "text": "y"}])
        assert batch["recipient"].pop("host_state") == "unseen"
        assert json.dumps(single) == json.dumps(batch) == json.dumps(again)
        # The kept answer is the store's; ``durable`` is each call's own (the level it met).
        assert {**bus.store.queue.first_answer("s1", first["id"]), "durable": "memory"} == first
    kept = bus.store.queue.first_answers("s1", ["one", "nope", "many"])
    assert kept == [without(one, "durable"), None, without(many, "durable")]
    # The turn's end writes the answer (answer_turn.lua re-encodes the kept form): a resend
    # gets it, in SendAnswer's order.
    bus.deliver_session("s1")
    bus.drain("s1")
    bus.turn("s1", "end", answer="done")
    resent = bus.send({"id": "one", "from": "neo:a", "to_id": "s1", "text": "hi"})
    before_dup = without(one, "duplicate", "durable")
    expected = {**before_dup, "state": "answered", "answer": "done", "duplicate": True}
    expected["durable"] = "memory"
    assert json.dumps(resent) == json.dumps(expected)


MSG = {"v": 1, "id": "m1", "ts": 5, "from": "ha:lane", "to_id": "s1", "text": "hi",
       "urgency": "queue", "kind": "message", "class": "action", "verified": False}  # fmt: skip
USUAL = {"v", "urgency", "kind", "class", "verified", "to_id", "id"}  # id: the record's
KEY, THREAD = thread_of("s1", MSG)
RECORD = {"id": "m1", "thread": THREAD, "class": "action", "kind": "message",
          "from": "ha:lane", "from_session": None, "at": 5, "mark": "new", "wakes": False,
          "why": "not_from_parent", "key": KEY, "m": MSG}  # fmt: skip
SAID = {"thread", "class", "kind", "from", "key", "at"}  # what the message and session say
RECORD_TABLE: list[tuple[str, dict[str, Any], set[str]]] = [
    ("what the message says goes", RECORD, SAID | {"from_session", "wakes", "why"}),
    ("a sender session, a wake and its reason stay",
     {**RECORD, "from_session": "lane", "wakes": True, "why": "parent"}, SAID),
    ("a class the message lacks stays", {**RECORD, "m": {**MSG, "class": None}},
     SAID - {"class"} | {"from_session", "wakes", "why"}),
    ("another thread stays", {**RECORD, "thread": "thr_other", "key": "topic:x"},
     SAID - {"thread", "key"} | {"from_session", "wakes", "why"}),
    ("a PR past what a script keeps exact keeps its thread",
     {**RECORD, "m": {**MSG, "pr": 10**15}, **dict(zip(("key", "thread"),
                                                   thread_of("s1", {**MSG, "pr": 10**15}),
                                                   strict=True))},
     SAID - {"thread", "key"} | {"from_session", "wakes", "why"}),
    ("an arrival other than the message's ts stays", {**RECORD, "at": 6},
     SAID - {"at"} | {"from_session", "wakes", "why"}),
    ("a ts past what a script keeps exact keeps its arrival",
     {**RECORD, "at": 10**15, "m": {**MSG, "ts": 10**15}},
     SAID - {"at"} | {"from_session", "wakes", "why"}),
    ("marks' times stay, after the others",
     {**RECORD, "mark": "answered", "noticed_at": 7, "answered_at": 9},
     SAID | {"from_session", "wakes", "why"}),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "record", "dropped"), RECORD_TABLE, ids=[r[0] for r in RECORD_TABLE]
)
def test_an_inbox_record_is_kept_without_what_its_message_says_and_restored_whole(
    name: str, record: dict[str, Any], dropped: set[str]
) -> None:
    stored = packing.keep_record(record, "s1")
    assert " " not in stored.replace('"hi"', "")
    assert set(record) - set(json.loads(stored)) == dropped
    back = packing.restore_record(stored, "s1")
    assert list(back) == list(record) and back == record  # the message's order may differ
    # Re-encoded in another order (cjson) it restores too.
    shuffled = json.dumps(dict(reversed(list(json.loads(stored).items()))))
    assert packing.restore_record(shuffled, "s1") == record


def test_every_reader_of_an_inbox_record_reads_the_compact_one_as_the_whole_one(bus: Bus) -> None:
    """The compact record: the inbox, the thread views, the notice and the receipt read
    it whole."""
    bus.open_session("s1")
    bus.open_session("lane")
    bus.turn("s1", "start")
    sent = bus.send({"from": "ha:lane", "from_session": "lane", "to_id": "s1", "text": "hey",
                     "class": "question"})  # fmt: skip
    bus.deliver_session("s1")
    [notice] = bus.drain("s1")  # type: ignore[misc]
    msgs = bus.store.k.s("s1", "msgs")
    raw = bus.store.r.hget(msgs, sent["id"])
    assert " " not in raw.replace('"hey"', "")
    assert {"thread", "key", "class", "kind", "from"}.isdisjoint(json.loads(raw))
    [thread] = bus.store.inbox.threads_of("s1")

    def views() -> list[Any]:
        return [
            bus.threads("s1"),
            bus.read("s1", thread),
            bus.store.inbox.records("s1", [sent["id"]]),
            bus.store.inbox.all_records("s1"),
            bus.receipt(sent["id"], by="lane"),
        ]

    compact_views = views()
    rec = compact_views[2][0]
    cls = rec["m"]["class"]
    assert (rec["class"], rec["kind"], rec["from"], rec["from_session"]) == (
        cls, "message", "ha:lane", "lane",
    )  # fmt: skip
    # The notice summarises the thread from the record's restored sender and class.
    [summary] = notice["notice"]["threads"]
    assert summary["senders"] == ["ha:lane"] and summary["blocker"] is (cls == "blocker")
    # Marked read through the views (re-kept compact), then the turn's answer (Lua).
    bus.read("s1", thread, mark_read=True)
    assert {"class", "kind", "from"}.isdisjoint(json.loads(bus.store.r.hget(msgs, sent["id"])))
    bus.turn("s1", "end", answer="done")
    [after] = bus.store.inbox.records("s1", [sent["id"]])
    assert after["class"] == cls and after["from"] == "ha:lane"
    assert bus.receipt(sent["id"], by="lane")["state"] in ("read", "answered")


M_TABLE: list[tuple[str, dict[str, Any], set[str]]] = [
    ("usual fields go", MSG, USUAL),
    ("unusual ones stay", {**MSG, "urgency": "urgent", "verified": True, "to_id": "s2"},
     USUAL - {"urgency", "verified", "to_id"}),
    ("a field it lacks is not made up", {f: v for f, v in MSG.items() if f != "verified"},
     USUAL - {"verified"}),
    ("an id other than the record's stays", {**MSG, "id": "m9"}, USUAL - {"id"}),
]  # fmt: skip


@pytest.mark.parametrize(("name", "msg", "dropped"), M_TABLE, ids=[r[0] for r in M_TABLE])
def test_a_records_message_is_kept_without_its_usual_fields_and_restored_whole(
    name: str, msg: dict[str, Any], dropped: set[str]
) -> None:
    record = {**RECORD, "m": msg, "class": msg["class"]}
    stored = json.loads(packing.keep_record(record, "s1"))
    assert set(msg) - set(stored["m"]) == dropped
    back = packing.restore_record(json.dumps(stored), "s1")
    assert back == record and next(iter(back["m"])) == "id"


THREAD_TABLE: list[tuple[str, dict[str, Any], str]] = [
    (
        "usual fields",
        {"v": 1, "id": "m1", "ts": 5, "from": "a:b", "to_id": "s1", "text": "hi",
         "urgency": "queue", "kind": "message", "class": "action", "verified": False},
        '{"id":"m1","ts":5,"from":"a:b","to_id":"s1","text":"hi","md":"vukcf"}',
    ),
    (
        "unusual fields kept",
        {"id": "m1", "from": "a:b", "to_id": "s1", "text": '"md": no', "urgency": "now",
         "class": "blocker", "verified": True},
        '{"id":"m1","from":"a:b","to_id":"s1","text":"\\"md\\": no","urgency":"now",'
        '"class":"blocker","verified":true}',
    ),
    ("nothing usual", {"id": "m1", "from": "a:b", "text": "x"}, '{"id":"m1","from":"a:b","text":"x"}'),
]  # fmt: skip


@pytest.mark.parametrize(
    ("msg", "kept_form"), [t[1:] for t in THREAD_TABLE], ids=[t[0] for t in THREAD_TABLE]
)
def test_a_one_message_threads_message_is_kept_compact_and_restored_whole(
    msg: dict[str, Any], kept_form: str
) -> None:
    assert packing.keep_thread_message(msg) == kept_form
    assert json.loads(packing.restore_thread_message(kept_form)) == msg
    assert packing.thread_message_id(kept_form) == "m1"
    whole = json.dumps(msg)  # a log entry past the first is kept whole: read as it is
    assert packing.restore_thread_message(whole) == whole


INGESTED: list[tuple[str, dict[str, Any], str | None, bool, str]] = [
    ("usual", {"v": 1, "id": "m1", "ts": 5, "from": "a:b", "to_id": "s1", "text": "hi",
               "urgency": "queue", "kind": "message", "class": "action"}, None, False,
     "not_from_parent"),
    ("from a session, waking", {"id": "m1", "from": "a:b", "to_id": "s1", "text": "PR #4 x",
                                "class": "blocker", "verified": True}, "s2", True, "blocker"),
    ("no class nor kind, another to", {"id": "m1", "from": "a:b", "to_id": "s9", "text": "x"},
     None, False, "not_from_parent"),
    ("a pr past cjson", {"id": "m1", "from": "a:b", "to_id": "s1", "pr": 10**15, "text": "x"},
     None, False, "not_from_parent"),
    ("to nobody", {"id": "m1", "from": "a:b", "to_id": "", "topic": "t", "text": "x"}, None,
     False, "not_from_parent"),
    ("wakes as a number", {"id": "m1", "from": "a:b", "to_id": "s1", "thread": "thr_x"}, "s1",
     0, "other"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("msg", "sender", "wakes", "why"), [t[1:] for t in INGESTED], ids=[t[0] for t in INGESTED]
)
def test_an_ingested_message_is_kept_in_one_pass_as_record_and_thread_keep_it(
    msg: dict[str, Any], sender: str | None, wakes: bool, why: str
) -> None:
    key, thread = thread_of("s1", msg)
    record = {
        "id": msg["id"], "thread": thread, "class": msg.get("class", "action"),
        "kind": msg.get("kind", "message"), "from": msg["from"], "from_session": sender,
        "at": 7, "mark": "new", "wakes": wakes, "why": why, "key": key, "m": msg,
    }  # fmt: skip
    whole = packing.whole_record(
        msg, key=key, thread=thread, sender_sid=sender, at=7, wakes=wakes, why=why
    )
    assert whole == record
    got = packing.keep_ingested(whole, "s1")
    assert got == (packing.keep_record(record, "s1"), packing.keep_thread_message(msg))
    assert packing.restore_record(got[0], "s1") == record


def test_the_records_the_batch_keeps_whole_are_what_their_readers_restore(bus: Bus) -> None:
    # bus.delivery.engine's notice reads the records it ingested from ``wholes``, not restored: they
    # must be what restore_record gives for the stored bytes.
    bus.open_session("s1")
    bus.open_session("s2")
    msgs = [
        {"v": 1, "id": "a1", "from": "h:x", "to_id": "s1", "text": "PR #3 hi", "ts": 5},
        {"id": "a2", "from": "h:s2", "from_session": "s2", "to_id": "s1", "text": "x",
         "class": "blocker", "urgency": "now", "verified": True},
        {"id": "a3", "from": "h:x", "to_id": "s1", "pr": 10**15, "text": "y", "ts": 6},
    ]  # fmt: skip
    wholes: dict[str, dict[str, Any]] = {}
    bus.inbox.ingest(
        "s1", [(m, 9) for m in msgs], bus.store.sessions.get_session("s1"), DeliveryReport("s1"),
        wholes=wholes,
    )  # fmt: skip
    stored = bus.store.r.hvals(bus.store.k.s("s1", "msgs"))
    assert sorted(stored) == sorted(wholes)
    for raw in stored:
        assert packing.restore_record(raw, "s1") == wholes[raw]
