"""Attacks through names (docs/security.md): handles held or stale, look-alike and
reserved names whatever their case, separators, scripts or invisible characters, and the
kinds only the bus writes. Each attack is refused (or shown for what it is) and nothing is
written.

Real Redis, real files, the CLI as a child.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from bus.api import Bus
from bus.core.errors import BadInput, Refused
from bus.core.stamp import render_stamp
from bus.core.text import reveal_invisible
from tests.support.cli import inbox_as
from tests.support.gateway_server import app_client, bearer
from tests.support.trust import keys_of, stored, tok

INVISIBLE_TABLE = [
    ("plain", "look at the diff", "look at the diff"),
    ("rlo", "run \u202etxt.exe", "run <U+202E>txt.exe"),
    ("isolates", "\u2066a\u2069", "<U+2066>a<U+2069>"),
    ("zero width space", "ap\u200bprove", "ap<U+200B>prove"),
    ("zero width joiner", "a\u200db", "a<U+200D>b"),
    ("bom", "\ufeffhi", "<U+FEFF>hi"),
    ("tags", "ok\U000e0041\U000e007f", "ok<U+E0041><U+E007F>"),
    ("arabic letter mark", "x\u061cy", "x<U+061C>y"),
    ("hangul filler", "a\u3164b", "a<U+3164>b"),
    ("visible non-ascii kept", "café ✓ 日本", "café ✓ 日本"),
]


def test_member_and_operator_names_are_reserved(two: Bus) -> None:
    two.items.member_add("acme", "gone")
    two.items.member_remove("acme", "gone")
    for handle in ("acme:dean", "acme:gone", "operator:root", "Operator:x"):
        with pytest.raises(BadInput) as err:
            two.open_session("mallory", handle=handle)
        assert err.value.code == "reserved_handle", handle
    out = inbox_as(two.settings, "session", "open", "mallory", "--handle", "acme:dean")
    assert out.returncode != 0 and json.loads(out.stdout)["error"] == "reserved_handle"
    with pytest.raises(BadInput) as err:
        two.items.member_add("operator", "root")
    assert err.value.code == "reserved_name"
    with pytest.raises(Refused) as refused:
        two.items.member_add("ha", "bob")  # a live session holds ha:bob
    assert refused.value.code == "handle_taken"
    assert two.store.sessions.get_session("mallory") is None


@pytest.mark.parametrize(
    "handle",
    [
        "ha:bob\u2800",  # Braille blank
        "ha:bob\u3164",  # Hangul filler
        "ha:\U0001d5ef\U0001d5fc\U0001d5ef",  # mathematical sans-serif bold
        "ha:\uff42\uff4f\uff42",  # full-width
        "ha:\ufb01le",  # the fi ligature
    ],
)
def test_look_alike_handles_are_refused(two: Bus, handle: str) -> None:
    with pytest.raises(BadInput) as err:
        two.open_session("mallory", handle=handle)
    assert err.value.code == "handle_confusable"
    out = inbox_as(two.settings, "session", "open", "mallory", "--handle", handle)
    assert out.returncode != 0 and json.loads(out.stdout)["error"] == "handle_confusable"
    assert two.store.sessions.get_session("mallory") is None


def test_a_handle_that_reads_as_a_live_one_is_refused(two: Bus) -> None:
    two.open_session("ape", handle="ae:ope")
    # Every letter Cyrillic (one script), and it reads exactly as ae:ope.
    with pytest.raises(BadInput) as err:
        two.open_session("mallory", handle="\u0430\u0435:\u043e\u0440\u0435")
    assert err.value.code == "handle_lookalike"
    two.open_session("cyr", handle="\u0445\u0430:\u0430\u0440\u0435")  # reads as xa:ape
    with pytest.raises(BadInput) as err:
        two.open_session("mallory", handle="xa:ape")  # the plain one, after the look-alike
    assert err.value.code == "handle_lookalike"
    two.close_session("cyr")
    two.open_session("mallory", handle="xa:ape")  # its holder closed: free again
    assert two.store.sessions.get_session("mallory") is not None


@pytest.mark.parametrize("handle", ["\u04bb1:alice", "h1:\u0430\u0440\u0435"])
def test_scripts_do_not_mix_across_a_handles_parts(two: Bus, handle: str) -> None:
    with pytest.raises(BadInput) as err:
        two.open_session("mallory", handle=handle)
    assert err.value.code == "handle_confusable" and "mixes scripts" in str(err.value)
    assert two.store.sessions.get_session("mallory") is None


@pytest.mark.parametrize(
    ("handle", "code"),
    [
        ("acme:Dean", "reserved_handle"),
        ("ACME:dean", "reserved_handle"),
        ("acme:dea\u0578", "handle_confusable"),  # Armenian vo with Latin: mixed scripts
        ("operator.:root", "reserved_handle"),
        ("OPERATOR:root", "reserved_handle"),
        ("h1:mallory,operator:root", "handle_confusable"),
        ("h1:mallory\u00b7x", "handle_confusable"),
        ("h1:\u2774x\u2775", "handle_confusable"),  # reads as h1:{x}: no key holds it
    ],
)
def test_reserved_names_match_whatever_their_case_and_separators_are_refused(
    two: Bus, handle: str, code: str
) -> None:
    with pytest.raises(BadInput) as err:
        two.open_session("mallory", handle=handle)
    assert err.value.code == code, handle
    assert two.store.sessions.get_session("mallory") is None


def test_the_cli_refuses_a_case_variant_of_a_member(two: Bus) -> None:
    out = inbox_as(two.settings, "session", "open", "mallory", "--handle", "Acme:DEAN")
    assert out.returncode != 0 and json.loads(out.stdout)["error"] == "reserved_handle"


@pytest.mark.parametrize("kind", ["notice", "retraction", "decision", "item", "reply"])
def test_a_sender_may_not_set_the_kinds_the_bus_writes(two: Bus, kind: str) -> None:
    fields = {"to_id": "bob", "text": "wake up", "class": "fyi", "kind": kind}
    with pytest.raises(BadInput) as err:
        two.send(fields, token=tok(session="loner"))
    assert err.value.code == "kind_reserved"
    with pytest.raises(BadInput):
        two.send_many([fields], token=tok(session="loner"))
    gw = app_client(two)
    r = gw.post("/v1/send", json=fields, headers=bearer(tok(session="loner")))
    assert r.status_code == 400 and r.json()["error"] == "kind_reserved"
    r = gw.post("/send", json=fields, headers=bearer(tok(session="loner")))  # prox's door
    assert r.status_code == 400 and r.json()["error"] == "kind_reserved"
    assert stored(two, "bob") == 0 and two.floor.peek("bob") == []
    assert two.send({**fields, "kind": "message"}, token=tok(session="loner"))["ok"]


def test_the_cli_refuses_a_reserved_kind(two: Bus, tmp_path: Path) -> None:
    lines = tmp_path / "m.jsonl"
    lines.write_text(json.dumps({"to_id": "bob", "text": "x", "kind": "notice"}) + "\n")
    out = inbox_as(two.settings, "send", "--jsonl", str(lines), INBOX_TOKEN=tok(session="loner"))
    assert out.returncode != 0 and "kind_reserved" in out.stdout + out.stderr
    assert stored(two, "bob") == 0


@pytest.mark.parametrize(
    ("name", "raw", "shown"), INVISIBLE_TABLE, ids=[r[0] for r in INVISIBLE_TABLE]
)
def test_invisible_characters_are_shown(name: str, raw: str, shown: str) -> None:
    assert reveal_invisible(raw) == shown


def test_a_stamp_shows_the_invisible_characters_a_body_keeps() -> None:
    out = render_stamp({"from": "h:a", "text": "approve \u202eyalp", "ts": 1790283480000})
    assert out.splitlines()[1] == "  │ approve <U+202E>yalp"
    assert "\u202e" not in out


def test_a_handle_held_by_an_open_session_cannot_be_taken(secured: Bus) -> None:
    before = keys_of(secured)
    with pytest.raises(Refused) as err:
        secured.open_session("mallory2", handle="ha:alice")
    assert err.value.code == "handle_taken" and err.value.details["holder"] == "alice"
    assert keys_of(secured) == before
    # Once alice's session is closed, the handle is free again.
    secured.close_session("alice")
    assert secured.open_session("alice2", handle="ha:alice")["ok"] is True


def test_a_stale_holder_gives_its_handle_up(make_bus: Callable[..., Bus]) -> None:
    b = make_bus(stale_s=60.0)
    b.open_session("old", handle="ha:x")
    b.store.r.hset(b.store.k.s("old", "session"), "last_seen", 1)  # not seen for ages
    assert b.open_session("new", handle="ha:x")["ok"] is True


def test_labels_lose_format_characters_and_confusable_handles_are_refused(bus: Bus) -> None:
    bus.open_session("s1")
    bus.turn("s1", "start")
    bus.send({"from": "ha:\u202eecila\u200b\U000e0041", "to_id": "s1", "text": "hi"})
    bus.deliver_session("s1")
    [notice] = bus.drain("s1")
    text = bus.render([notice])
    stamp = render_stamp({"from": "ha:\u202eecila\u200b", "text": "x"})
    for out in (text, stamp):
        assert not any(ch in out for ch in "\u202e\u200b\U000e0041")
    before = keys_of(bus)
    with pytest.raises(BadInput) as err:
        bus.open_session("mallory", handle="h\u0430:alice")  # Cyrillic a
    assert err.value.code == "handle_confusable"
    with pytest.raises(BadInput):
        bus.open_session("mallory", handle="ha:al\u200bice")
    assert keys_of(bus) == before
