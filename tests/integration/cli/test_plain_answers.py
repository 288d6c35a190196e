"""Small things a newcomer meets: blank text in our words, a send to an unknown id says
what it kept, ``read-inbox`` answers ``ok``, and a reply's length is checked first."""

from __future__ import annotations

import json

import pytest

from bus.api import Bus
from bus.core.errors import BadInput, NotFound
from bus.core.models import parse_message
from bus.core.settings import Settings
from tests.support.cli import inbox_as


def test_send_with_blank_text_is_refused_in_our_words(settings: Settings, bus: Bus) -> None:
    bus.open_session("demo")
    out = inbox_as(settings, "send", "--to-id", "demo", "--from", "hosta:me", "--text", "")
    assert out.returncode == 2
    answer = json.loads(out.stdout)
    assert answer["error"] == "bad_input"
    assert answer["message"] == "--text must not be blank (1-8000 characters)"
    assert bus.threads("demo")["threads"] == []  # nothing written


def test_a_blank_message_on_the_wire_has_no_pydantic_wording() -> None:
    with pytest.raises(BadInput) as caught:
        parse_message({"from": "h:me", "to_id": "x", "text": "  "})
    assert str(caught.value).startswith("text must not be blank")
    assert "Value error" not in str(caught.value)


def test_a_send_to_an_unknown_id_says_it_kept_a_bounced_receipt(
    settings: Settings, bus: Bus
) -> None:
    bus.open_session("alice")
    out = inbox_as(
        settings, "send", "--to-id", "nobody", "--from", "hosta:alice", "--text", "hello"
    )
    assert out.returncode == 1
    answer = json.loads(out.stdout)
    assert answer["error"] == "not_found" and answer["state"] == "bounced"
    assert "kept as bounced" in answer["message"] and "kept as bounced" in out.stderr
    assert answer["id"]  # the id its receipt is kept under


def test_read_inbox_answers_ok(settings: Settings, bus: Bus) -> None:
    bus.open_session("agent")
    out = inbox_as(settings, "read-inbox", "agent")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"ok": True, "items": []}


def test_a_too_long_reply_is_refused_for_its_length_first(bus: Bus) -> None:
    bus.open_session("bob")
    with pytest.raises(NotFound):
        bus.reply("bob", "thr_nosuchthread", "fine")
    # The same reply, too long: its length is what is wrong, whatever the thread.
    with pytest.raises(BadInput) as long:
        bus.reply("bob", "thr_nosuchthread", "x" * 9000)
    assert "longer than 8000 characters" in str(long.value)
