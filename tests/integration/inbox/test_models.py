"""The wire model: validation, defaults, aliases, and schema files that match it."""

from __future__ import annotations

from typing import Any

import pytest

from bus.core.errors import BadInput
from bus.core.models import Message, parse_message
from bus.ops import schemas

BASE: dict[str, Any] = {"from": "neo:sip", "to_id": "s1", "text": "look at the diff"}


def test_defaults_are_filled_on_receipt() -> None:
    m = parse_message(BASE)
    wire = m.wire()
    assert wire["v"] == 1 and wire["kind"] == "message" and wire["class"] == "action"
    assert wire["urgency"] == "queue" and len(wire["id"]) == 36 and wire["ts"] > 0


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("block", "blocker"),
        ("question", "blocker"),
        ("blocker", "blocker"),
        ("result", "action"),
        ("action", "action"),
        ("fyi", "fyi"),
        ("report", "report"),
    ],
)
def test_class_aliases(given: str, expected: str) -> None:
    assert parse_message({**BASE, "class": given}).class_ == expected


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"to_id": "a/b"}, "to_id"),
        ({"to_id": ".."}, "to_id"),
        ({"to_id": "a\x00b"}, "to_id"),
        ({"to_id": "x" * 181}, "to_id"),
        ({"text": "x" * 8001}, "longer than 8000"),
        ({"text": "   "}, "blank"),
        ({"urgency": "now"}, "urgency"),
        ({"class": "gossip"}, "class"),
        ({"kind": "email"}, "kind"),
        ({"colour": "red"}, "unknown field 'colour'"),
        ({"from": "no-colon"}, "from"),
        ({"thread": "thread-1"}, "thread"),
    ],
)
def test_bad_input_is_refused_with_a_clear_error(change: dict[str, Any], needle: str) -> None:
    with pytest.raises(BadInput) as err:
        parse_message({**BASE, **change})
    assert needle in str(err.value)


def test_text_of_exactly_8000_characters_is_kept_whole() -> None:
    assert len(parse_message({**BASE, "text": "y" * 8000}).text) == 8000


def test_blank_text_is_allowed_with_pictures() -> None:
    files = [{"name": "a.png", "content_type": "image/png", "size": 3, "sha256": "0" * 64}]
    assert parse_message({**BASE, "text": "", "files": files}).files


def test_prox_line_round_trips() -> None:
    line = (
        '{"v":1,"id":"5d1c","ts":1790283480000,"from":"neo:sip","to":"neo:fotos",'
        '"to_id":"abc","text":"look","urgency":"queue","kind":"message"}'
    )
    m = parse_message(line)
    assert m.to == "neo:fotos" and Message.model_validate_json(m.line()) == m


def test_schema_files_match_the_models() -> None:
    assert schemas.stale() == [], "run: python -m bus.ops.schemas"


def test_schema_check_fails_when_a_file_drifts(tmp_path: Any) -> None:
    schemas.write(tmp_path)
    assert schemas.stale(tmp_path) == []
    target = tmp_path / "message.schema.json"
    target.write_text(target.read_text().replace('"text"', '"body"'))
    assert schemas.stale(tmp_path) == ["message.schema.json"]


def test_what_the_bus_answers_matches_the_exported_models(bus: Any, tmp_path: Any) -> None:
    """The wire shapes the surfaces print are the models' (extra fields refused)."""
    from bus.core.models import DecisionAnswer, NoticeLine, ReadInbox, ThreadRow, ThreadView

    bus.open_session("alice")
    bus.open_session("bob")
    bus.turn("bob", "start")
    sent = bus.send(
        {
            "from": "hosta:alice",
            "from_session": "alice",
            "to_id": "bob",
            "text": "hi",
            "urgency": "urgent",
        }
    )
    bus.deliver_session("bob")
    [notice] = bus.floor.peek("bob")
    NoticeLine.model_validate(notice)
    [row] = bus.threads("bob")["threads"]
    ThreadRow.model_validate(row)
    ThreadView.model_validate(bus.read("bob", sent["thread"]))
    req = bus.request("bob", "task", "do it", actor="alice")
    DecisionAnswer.model_validate(bus.decide(req["thread"], "accept", actor="bob"))
    bus.member_add("acme", "dean")
    bus.open_session("coder", workspace="acme", starter="dean")
    bus.item_post("coder", "k1", title="ok?")
    bus.item_write("coder", "k1", member="dean", text="hello")
    bus.reply_inbox("coder", "k1", text="hi dean", root=tmp_path)
    ReadInbox.model_validate(bus.read_inbox("coder"))
