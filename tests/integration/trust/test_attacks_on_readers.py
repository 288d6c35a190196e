"""Attacks through readers' subscriptions (docs/security.md, "The third pass"): what a
reader is handed of a session, who may name a session's parent, readers' ids, and the
bounds on their subscriptions. Each attack is refused and nothing is written.

Real Redis, the gateway in-process (TestClient), MCP as a child.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from bus.api import Bus
from bus.core.errors import Refused
from bus.core.models import now_ms
from bus.services.durable_watch import CursorExpired, poll, visible
from bus.trust.rules import parent_refusal
from tests.support.trust import tok
from tests.support.waiting import wait_for


def taken(b: Bus, reader: str, name: str, **kw: Any) -> list[dict[str, Any]]:
    """What ``reader``'s own subscription ``name`` is handed now (one read)."""
    sub = b.watch.reader_subscription(reader, name, **kw)
    events, _ = poll(sub, max_events=100, wait_ms=200)
    return events


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
def test_what_a_reader_is_handed_of_a_session(
    reader: str | None, full: set[str], sid: str, sender: str | None, shown: bool
) -> None:
    assert visible(reader, full, sid, {"from_session": sender}) is shown


def test_a_first_message_does_not_open_the_receivers_inbox(two: Bus) -> None:
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


@pytest.mark.parametrize(("prior", "wanted", "opener", "exists", "auth", "why"), PARENT_TABLE)
def test_who_may_name_an_open_sessions_parent(
    prior: str | None,
    wanted: str | None,
    opener: tuple[str, str] | None,
    exists: bool,
    auth: bool,
    why: str | None,
) -> None:
    got = parent_refusal(prior, wanted, opener, exists=exists, sid="s", auth=auth)
    assert got == why


def test_a_tokenless_reopen_cannot_make_a_reader_the_parent(two: Bus) -> None:
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
async def test_the_mcp_watch_hands_over_only_the_readers_own_messages(
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


def test_readers_with_dotted_ids_never_share_a_subscription(bus: Bus) -> None:
    for sid in ("p", "p.c"):
        bus.open_session(sid)
    a = bus.watch.reader_subscription("p", "c.lanes", sessions=["p"], lanes=False)
    b = bus.watch.reader_subscription("p.c", "lanes", sessions=["p.c"], lanes=False)
    assert a.name != b.name
    assert {a.name, b.name} == {"p/c.lanes", "p.c/lanes"}


def test_a_reader_holds_a_bounded_number_of_subscriptions(make_bus: Callable[..., Bus]) -> None:
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


def test_an_idle_subscription_no_longer_pins_the_events(bus: Bus) -> None:
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
