"""Readers' subscriptions, reserved and look-alike names, the bus's own kinds, receipts and
/health under attack (docs/security.md), one test each: the attack is refused on every
surface it reached and nothing is written.

Real Redis, real files, the gateway in-process (TestClient), MCP as a child.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from bus.api import Bus
from bus.core.errors import BadInput, NotFound, Refused
from bus.core.models import now_ms
from bus.core.stamp import render_stamp
from bus.core.text import reveal_invisible
from bus.delivery.floor import Floor
from bus.services.durable_watch import CursorExpired, poll, visible
from bus.surfaces.harness.listener import Listener
from bus.surfaces.http.gateway import create_app
from bus.trust.rules import parent_refusal
from tests.support.cli import inbox_as
from tests.support.trust import DEAN, stored, tok
from tests.support.waiting import wait_for


def gateway(b: Bus) -> TestClient:
    return TestClient(create_app(b), base_url="http://127.0.0.1")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def taken(b: Bus, reader: str, name: str, **kw: Any) -> list[dict[str, Any]]:
    """What ``reader``'s own subscription ``name`` is handed now (one read)."""
    sub = b.watch.reader_subscription(reader, name, **kw)
    events, _ = poll(sub, max_events=100, wait_ms=200)
    return events


# 1 ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reader", "full", "sid", "sender", "shown"),
    [
        (None, set(), "victim", "bob", True),  # an operator's inbox watch: everything
        ("alice", {"alice"}, "alice", "bob", True),  # its own inbox
        ("alice", {"alice", "lane"}, "lane", "bob", True),  # a session it started
        ("alice", {"alice"}, "victim", "alice", True),  # its own message to a session
        ("alice", {"alice"}, "victim", "bob", False),  # another sender's: never
        ("alice", {"alice"}, "victim", None, False),  # an unverified one's
    ],
)
def test_1_what_a_reader_is_handed_of_a_session(
    reader: str | None, full: set[str], sid: str, sender: str | None, shown: bool
) -> None:
    assert visible(reader, full, sid, {"from_session": sender}) is shown


def test_1_a_first_message_does_not_open_the_receivers_inbox(two: Bus) -> None:
    bob, other = tok(session="bob"), tok(session="other")  # two senders, two workspaces
    two.open_session("victim", handle="hv:victim")  # no turn yet
    two.open_session("lane", handle="hv:lane", parent="loner")  # one loner started
    two.send({"to_id": "victim", "text": "start"}, token=bob)
    two.deliver_session("victim")
    # The first message made bob victim's delegator, and victim one of bob's lanes:
    assert "victim" in two.store.sessions.gave_to("bob")
    assert taken(two, "bob", "w", sessions=["victim"], lanes=True) == []  # from now on
    mine = two.send({"to_id": "victim", "text": "and then"}, token=bob)
    two.send({"to_id": "victim", "text": "the deploy password is hunter2"}, token=other)
    got = taken(two, "bob", "w", sessions=["victim"], lanes=True)
    assert [e["message"]["id"] for e in got] == [mine["id"]]
    assert "hunter2" not in json.dumps(got)
    # A session its reader started is still followed whole (the coordinator's lanes).
    assert taken(two, "loner", "w", sessions=None, lanes=True) == []
    theirs = two.send({"to_id": "lane", "text": "for the lane"}, token=bob)
    got = taken(two, "loner", "w", sessions=None, lanes=True)
    assert [e["message"]["id"] for e in got] == [theirs["id"]]


PARENT_TABLE = [
    # (prior, wanted, opener, exists, auth) -> refusal
    ("a", "mallory", None, True, True, "parent_fixed"),  # no token moves it
    ("a", "mallory", ("session", "mallory"), True, True, "parent_fixed"),  # another's
    ("a", "mallory", ("member", "acme/dean"), True, True, "parent_fixed"),
    (None, "mallory", None, True, True, "parent_fixed"),  # none yet: still the receiver's
    ("a", "b", ("session", "s"), True, True, None),  # its own token
    ("a", "b", ("operator", "root"), True, True, None),
    ("a", "a", None, True, True, None),  # a restart as registered
    ("a", None, None, True, True, None),  # a restart naming none
    (None, "coord", None, False, True, None),  # a new session: its opener names it
    ("a", "mallory", None, True, False, None),  # no secret: nothing is verified
]


@pytest.mark.parametrize(("prior", "wanted", "opener", "exists", "auth", "why"), PARENT_TABLE)
def test_1_who_may_name_an_open_sessions_parent(
    prior: str | None,
    wanted: str | None,
    opener: tuple[str, str] | None,
    exists: bool,
    auth: bool,
    why: str | None,
) -> None:
    got = parent_refusal(prior, wanted, opener, exists=exists, sid="s", auth=auth)
    assert got == why


def test_1_a_tokenless_reopen_cannot_make_a_reader_the_parent(two: Bus) -> None:
    two.open_session("victim", handle="hv:victim")
    with pytest.raises(Refused) as err:
        two.open_session("victim", handle="hv:victim", parent="other")  # no token
    assert err.value.code == "parent_fixed"
    assert two.session("victim").parent is None and "victim" not in two.store.sessions.lanes_of(
        "other"
    )
    two.open_session("victim", handle="hv:victim", parent="other", token=tok(session="victim"))
    assert two.session("victim").parent == "other"


@pytest.mark.anyio
async def test_1_the_mcp_watch_hands_over_only_the_readers_own_messages(
    bus: Bus, settings: Any
) -> None:
    from tests.support.mcp_client import call, mcp_client, ok

    for sid in ("alice", "victim"):
        bus.open_session(sid)
    alice = {"from": "hosta:alice", "from_session": "alice", "to_id": "victim"}
    bus.send({**alice, "text": "start"})
    bus.deliver_session("victim")  # its first work: victim is alice's lane now
    async with mcp_client(settings, "alice") as client:
        ok(await call(client, "watch", wait_s=0.1))  # made: from now on
        mine = bus.send({**alice, "text": "and then"})
        bus.send({"from": "hosta:bob", "to_id": "victim", "text": "hunter2"})
        got = ok(await call(client, "watch", wait_s=2))
    assert [e["message"]["id"] for e in got["events"]] == [mine["id"]]


# 2 ------------------------------------------------------------------------------------------


def test_2_a_handle_that_reads_as_a_live_one_is_refused(two: Bus) -> None:
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
def test_2_scripts_do_not_mix_across_a_handles_parts(two: Bus, handle: str) -> None:
    with pytest.raises(BadInput) as err:
        two.open_session("mallory", handle=handle)
    assert err.value.code == "handle_confusable" and "mixes scripts" in str(err.value)
    assert two.store.sessions.get_session("mallory") is None


# 3 ------------------------------------------------------------------------------------------


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
def test_3_reserved_names_match_whatever_their_case_and_separators_are_refused(
    two: Bus, handle: str, code: str
) -> None:
    with pytest.raises(BadInput) as err:
        two.open_session("mallory", handle=handle)
    assert err.value.code == code, handle
    assert two.store.sessions.get_session("mallory") is None


def test_3_the_cli_refuses_a_case_variant_of_a_member(two: Bus) -> None:
    out = inbox_as(two.settings, "session", "open", "mallory", "--handle", "Acme:DEAN")
    assert out.returncode != 0 and json.loads(out.stdout)["error"] == "reserved_handle"


# 4 ------------------------------------------------------------------------------------------


def test_4_prox_send_refuses_another_senders_id(bus: Bus) -> None:
    bus.open_session("victim")
    gw = gateway(bus)
    first = {"from": "h:mallory", "to_id": "victim", "text": "squat", "id": "deploy-42"}
    assert gw.post("/send", json=first).json()["ok"] is True
    r = gw.post("/send", json={**first, "from": "h:alice", "text": "the real deploy"})
    assert r.status_code == 403 and r.json()["error"] == "id_taken"
    assert gw.post("/send", json=first).json()["ok"] is True  # its sender's again: its own
    assert [o["from"] for o in bus.floor.peek("victim")] == ["h:mallory", "h:mallory"]


def test_4_a_listener_and_a_drain_tell_senders_apart(tmp_path: Path) -> None:
    fl = Floor(tmp_path / "home")
    fl.prepare("victim")
    heard: list[dict[str, Any]] = []

    def on_line(obj: dict[str, Any]) -> bool:
        heard.append(obj)
        return True

    mallory = {"id": "deploy-42", "from": "h:mallory", "text": "squat"}
    alice = {**mallory, "from": "h:alice", "text": "the real deploy"}
    with Listener.for_session(fl, "victim", on_line):
        assert fl.write_line("victim", mallory)[0] == "socket"
        assert fl.write_line("victim", alice)[0] == "socket"
        wait_for(lambda: len(heard) == 2, 10, "both lines handed on")
    assert [o["from"] for o in heard] == ["h:mallory", "h:alice"]
    # A line of alice's the listener acked too late sits on the file: the drain shows it.
    fl.append("victim", {**alice, "id": "deploy-43"})
    fl.append("victim", {**mallory, "id": "deploy-43"})
    (fl.session_dir("victim") / "heard.jsonl").write_text(
        json.dumps({"id": "deploy-43", "from": "h:mallory"}) + "\n"
    )
    result = fl.drain("victim")
    assert [o["from"] for o in result.lines] == ["h:alice"]
    assert [o["from"] for o in result.heard] == ["h:mallory"]


# 5 ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["notice", "retraction", "decision", "item", "reply"])
def test_5_a_sender_may_not_set_the_kinds_the_bus_writes(two: Bus, kind: str) -> None:
    fields = {"to_id": "bob", "text": "wake up", "class": "fyi", "kind": kind}
    with pytest.raises(BadInput) as err:
        two.send(fields, token=tok(session="loner"))
    assert err.value.code == "kind_reserved"
    with pytest.raises(BadInput):
        two.send_many([fields], token=tok(session="loner"))
    gw = gateway(two)
    r = gw.post("/v1/send", json=fields, headers=bearer(tok(session="loner")))
    assert r.status_code == 400 and r.json()["error"] == "kind_reserved"
    r = gw.post("/send", json=fields, headers=bearer(tok(session="loner")))  # prox's door
    assert r.status_code == 400 and r.json()["error"] == "kind_reserved"
    assert stored(two, "bob") == 0 and two.floor.peek("bob") == []
    assert two.send({**fields, "kind": "message"}, token=tok(session="loner"))["ok"]


def test_5_the_cli_refuses_a_reserved_kind(two: Bus, tmp_path: Path) -> None:
    lines = tmp_path / "m.jsonl"
    lines.write_text(json.dumps({"to_id": "bob", "text": "x", "kind": "notice"}) + "\n")
    out = inbox_as(two.settings, "send", "--jsonl", str(lines), INBOX_TOKEN=tok(session="loner"))
    assert out.returncode != 0 and "kind_reserved" in out.stdout + out.stderr
    assert stored(two, "bob") == 0


# 6 ------------------------------------------------------------------------------------------


def test_6_readers_with_dotted_ids_never_share_a_subscription(bus: Bus) -> None:
    for sid in ("p", "p.c"):
        bus.open_session(sid)
    a = bus.watch.reader_subscription("p", "c.lanes", sessions=["p"], lanes=False)
    b = bus.watch.reader_subscription("p.c", "lanes", sessions=["p.c"], lanes=False)
    assert a.name != b.name
    assert {a.name, b.name} == {"p/c.lanes", "p.c/lanes"}


# 7 ------------------------------------------------------------------------------------------


def test_7_a_reader_holds_a_bounded_number_of_subscriptions(make_bus: Callable[..., Bus]) -> None:
    b = make_bus(sub_max=2)
    b.open_session("r")
    for name in ("one", "two", "one"):  # a name used again is no new one
        b.watch.reader_subscription("r", name, sessions=["r"], lanes=False)
    with pytest.raises(Refused) as err:
        b.watch.reader_subscription("r", "three", sessions=["r"], lanes=False)
    assert err.value.code == "too_many_subscriptions"
    assert b.store.r.exists(b.store.k.sub("r/three")) == 0
    # Unused for the idle time, a name is forgotten and its place taken.
    store = b.store
    assert store.events.sub_claim("r", "three", now_ms() + 10_000, 5_000, 2)
    assert store.r.zrange(store.k.reader_subs("r"), 0, -1) == ["three"]


def test_7_an_idle_subscription_no_longer_pins_the_events(bus: Bus) -> None:
    bus.open_session("r")
    bus.watch.reader_subscription("r", "s", sessions=["r"], lanes=False)
    bus.send({"from": "h:x", "to_id": "r", "text": "unread"})
    store = bus.store
    assert 0 < store.r.pttl(store.k.sub("r/s")) <= 7 * 86400 * 1000  # expires unused
    assert store.events.drop_quiet_events(["r"], 0) == 0  # a cursor in use keeps them
    subs = store.k.s("r", "subs")
    cursor = store.r.hget(subs, "r/s").partition("|")[0]
    store.r.hset(subs, "r/s", f"{cursor}|1")  # its last use long ago
    wait_for(lambda: store.events.drop_quiet_events(["r"], 0) > 0, 10, "the events dropped")
    # Back after its records were dropped unread: refused, never silently past them.
    with pytest.raises(CursorExpired):
        bus.watch.reader_subscription("r", "s", sessions=["r"], lanes=False)


# wake commands --------------------------------------------------------------------------


def test_the_worker_runs_only_the_wake_command_kept_on_its_host(bus: Bus, tmp_path: Path) -> None:
    mine, planted = tmp_path / "mine", tmp_path / "planted"
    bus.open_session("sleeper", wake_cmd=f"touch {mine}")
    # A process that can write to Redis plants its own command in the record.
    bus.store.r.hset(bus.store.k.s("sleeper", "session"), "wake_cmd", f"touch {planted}")
    bus.inbox.notices.run_wake_cmd("sleeper", {"text": "[inbox · 1 new]"})
    wait_for(lambda: mine.exists() or planted.exists(), 30, "a wake command")
    assert mine.exists() and not planted.exists()
    assert (bus.floor.session_dir("sleeper") / "wake_cmd").stat().st_mode & 0o777 == 0o600
    # A session opened for another host has no command kept here: nothing runs (a quick
    # command started is over when run_wake_cmd returns: bus.delivery.wake_cmd.start).
    bus.open_session("far", host="elsewhere", wake_cmd=f"touch {planted}")
    bus.inbox.notices.run_wake_cmd("far", {"text": "[inbox · 1 new]"})
    assert not planted.exists()


# receipts and health ------------------------------------------------------------------------


def test_a_receipt_says_the_same_of_another_senders_id_and_an_unknown_one(two: Bus) -> None:
    sent = two.send({"to_id": "bob", "text": "hi"}, token=tok(session="other"))
    answers = []
    for msg_id in (sent["id"], "no-such-message"):
        with pytest.raises(NotFound) as err:
            two.receipt(msg_id, token=tok(session="loner"))
        answers.append((err.value.code, str(err.value).replace(msg_id, "ID")))
    assert answers[0] == answers[1]
    gw = gateway(two)
    codes = [
        gw.get(f"/v1/messages/{i}", headers=bearer(tok(session="loner"))).status_code
        for i in (sent["id"], "no-such-message")
    ]
    assert codes == [404, 404]


def test_health_without_a_token_shows_no_host_home_or_pid(two: Bus) -> None:
    two.store.schedule.beat("hosta", {"pid": 4242, "started": now_ms(), "beat": now_ms()})
    gw = gateway(two)
    bare = gw.get("/health")
    assert bare.status_code == 200 and bare.json() == {"ok": True, "redis": True}
    assert str(two.settings.home) not in bare.text and "4242" not in bare.text
    forged = gw.get("/health", headers=bearer("inb1.x.y")).json()
    assert "host" not in forged and "workers" not in forged
    shown = gw.get("/health", headers=bearer(DEAN)).json()
    assert shown["host"] == two.settings.host and "workers" in shown


# invisible characters -------------------------------------------------------------------------

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


@pytest.mark.parametrize(
    ("name", "raw", "shown"), INVISIBLE_TABLE, ids=[r[0] for r in INVISIBLE_TABLE]
)
def test_invisible_characters_are_shown(name: str, raw: str, shown: str) -> None:
    assert reveal_invisible(raw) == shown


def test_a_stamp_shows_the_invisible_characters_a_body_keeps() -> None:
    out = render_stamp({"from": "h:a", "text": "approve \u202eyalp", "ts": 1790283480000})
    assert out.splitlines()[1] == "  │ approve <U+202E>yalp"
    assert "\u202e" not in out
