"""``inbox mcp`` as a real stdio subprocess, driven by the MCP SDK's own client."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bus.api import Bus
from bus.core.settings import Settings
from tests.support.mcp_client import call, error_text, mcp_client, ok
from tests.support.waiting import wait_for
from tests.support.worker_proc import WorkerProcess

pytestmark = pytest.mark.anyio

TOOLS = {"send", "inbox", "threads", "read", "reply", "withdraw", "receipt", "sent"}


def stream_len(b: Bus, sid: str) -> int:
    return int(b.store.r.xlen(b.store.k.s(sid, "stream")))


async def test_lists_the_tools(settings: Settings, bus: Bus) -> None:
    async with mcp_client(settings, "me") as client:
        names = {t.name for t in (await client.list_tools()).tools}
    assert names >= TOOLS
    for optional in ("decide", "read_inbox", "reply_inbox"):
        assert (optional in names) == hasattr(bus, optional)


async def test_send_by_handle_stores_it_from_the_callers_handle(
    settings: Settings, bus: Bus
) -> None:
    bus.open_session("me", handle="hosta:me")
    bus.open_session("peer", handle="hosta:peer")
    async with mcp_client(settings, "me") as client:
        answer = ok(
            await call(client, "send", handle="hosta:peer", text="look", **{"class": "fyi"})
        )
    assert answer["state"] == "stored"
    assert answer["recipient"]["session"] == "peer"
    [(_eid, fields)] = bus.store.r.xrange(bus.store.k.s("peer", "stream"))
    wire = json.loads(fields["m"])
    assert wire["id"] == answer["id"]
    assert wire["from"] == "hosta:me"
    assert wire["from_session"] == "me"
    assert wire["class"] == "fyi"
    assert wire["to"] == "hosta:peer"


async def test_send_without_a_caller_session_is_anonymous(settings: Settings, bus: Bus) -> None:
    bus.open_session("peer")
    async with mcp_client(settings, None) as client:
        answer = ok(await call(client, "send", to_id="peer", text="hi"))
        refused = await call(client, "threads")
    [(_eid, fields)] = bus.store.r.xrange(bus.store.k.s("peer", "stream"))
    assert json.loads(fields["m"])["from"] == "hosta:inbox"
    assert answer["state"] == "stored"
    assert "INBOX_SESSION" in error_text(refused)


async def test_unknown_handle_is_an_error_and_nothing_is_stored(
    settings: Settings, bus: Bus
) -> None:
    bus.open_session("peer", handle="hosta:peer")
    async with mcp_client(settings, "me") as client:
        result = await call(client, "send", handle="hosta:nobody", text="hello?")
        both = await call(client, "send", handle="hosta:peer", to_id="peer", text="x")
    assert "not_found" in error_text(result)
    assert "hosta:nobody" in error_text(result)
    assert result.structured_content and result.structured_content["error"] == "not_found"
    assert both.is_error
    assert stream_len(bus, "peer") == 0


async def test_ambiguous_handle_lists_candidates_and_stores_nothing(
    settings: Settings, bus: Bus
) -> None:
    bus.open_session("twin1", handle="hosta:twin")
    # twin1's harness is long gone (stale), so twin2 may take the handle; both still live.
    bus.store.r.hset(bus.store.k.s("twin1", "session"), "last_seen", 1)
    bus.open_session("twin2", handle="hosta:twin")
    bus.turn("twin2", "start")
    async with mcp_client(settings, "me") as client:
        result = await call(client, "send", handle="hosta:twin", text="which one?")
    text = error_text(result)
    assert "ambiguous" in text
    assert "twin1 (idle" in text and "twin2 (running" in text
    data = result.structured_content
    assert data is not None
    cands = {c["session"]: c for c in data["candidates"]}
    assert set(cands) == {"twin1", "twin2"}
    assert cands["twin2"]["state"] == "running"
    assert all(isinstance(c["age_s"], int) for c in cands.values())
    assert stream_len(bus, "twin1") == stream_len(bus, "twin2") == 0


async def test_recipient_reads_and_replies_through_mcp(settings: Settings, bus: Bus) -> None:
    bus.open_session("me", handle="hosta:me")
    bus.open_session("peer", handle="hosta:peer")
    async with mcp_client(settings, "me") as me:
        sent = ok(await call(me, "send", handle="hosta:peer", text="see PR 12", pr=12))
    bus.deliver_session("peer")
    async with mcp_client(settings, "peer") as peer:
        threads = ok(await call(peer, "threads"))["threads"]
        assert [t["threadId"] for t in threads] == [sent["thread"]]
        assert threads[0]["unread"] == 1
        thread = ok(await call(peer, "read", thread=sent["thread"], mark_read=True))
        assert [m["id"] for m in thread["messages"]] == [sent["id"]]
        assert thread["messages"][0]["text"] == "see PR 12"
        assert ok(await call(peer, "threads"))["threads"][0]["unread"] == 0
        replied = ok(await call(peer, "reply", thread=sent["thread"], text="on it"))
        assert replied["to"] == ["me"]
        missing = await call(peer, "read", thread="thr_nosuchthread")
        assert missing.is_error
    bus.deliver_session("me")
    texts = [m["text"] for m in bus.read("me", sent["thread"])["messages"]]
    assert texts == ["see PR 12", "on it"]


async def test_withdraw_through_mcp(settings: Settings, bus: Bus) -> None:
    bus.open_session("me", handle="hosta:me")
    bus.open_session("peer", handle="hosta:peer")
    async with mcp_client(settings, "me") as me:
        sent = ok(await call(me, "send", handle="hosta:peer", text="never mind"))
    async with mcp_client(settings, "peer") as peer:
        # Only the sender may withdraw: the caller is INBOX_SESSION, not a tool argument.
        assert (await call(peer, "withdraw", message_id=sent["id"])).is_error
    async with mcp_client(settings, "me") as me:
        gone = ok(await call(me, "withdraw", message_id=sent["id"]))
    assert gone["state"] == "unsent"


async def test_inbox_peeks_then_consumes_the_callers_floor(settings: Settings, bus: Bus) -> None:
    bus.open_session("me", handle="hosta:me")
    first = bus.deliver_local("me", sender="hosta:peer", text="one")
    second = bus.deliver_local("me", sender="hosta:peer", text="two\nlines")
    async with mcp_client(settings, "me") as client:
        peeked = ok(await call(client, "inbox"))
        again = ok(await call(client, "inbox"))
        taken_result = await call(client, "inbox", consume=True)
        taken = ok(taken_result)
        empty = ok(await call(client, "inbox", consume=True))
    ids = [first["id"], second["id"]]
    assert [x["id"] for x in peeked["lines"]] == ids
    assert again["lines"] == peeked["lines"]
    assert "[inbox from hosta:peer" in peeked["text"] and "│ lines" in peeked["text"]
    assert [x["id"] for x in taken["lines"]] == ids and taken["consumed"] is True
    assert taken_result.content[0].text == taken["text"]  # type: ignore[union-attr]
    assert empty["lines"] == [] and empty["text"] == ""
    assert bus.peek("me") == []


async def test_decide_through_mcp_acts_as_the_caller(settings: Settings, bus: Bus) -> None:
    if not (hasattr(bus, "decide") and hasattr(bus, "request")):
        pytest.skip("Bus.decide / Bus.request not there yet")
    bus.open_session("asker")
    bus.open_session("me")
    opened = bus.request("me", "task", "do it", actor="asker")
    async with mcp_client(settings, "asker") as asker:
        # The asker cannot accept its own request: the actor is INBOX_SESSION.
        own = await call(asker, "decide", thread_id=opened["thread"], decision="accept")
    async with mcp_client(settings, "me") as me:
        accepted = ok(await call(me, "decide", thread_id=opened["thread"], decision="accept"))
        again = await call(me, "decide", thread_id=opened["thread"], decision="decline")
    assert "invalid_for_state" in error_text(own)
    assert accepted["new_state"] == "CONFIRMED"
    assert "thread_terminal" in error_text(again)


async def test_items_through_mcp(settings: Settings, bus: Bus) -> None:
    if not (hasattr(bus, "read_inbox") and hasattr(bus, "reply_inbox")):
        pytest.skip("Bus.read_inbox / reply_inbox not there yet")
    bus.open_session("me")
    async with mcp_client(settings, "me") as client:
        items = ok(await call(client, "read_inbox"))
        refused = await call(client, "reply_inbox", key="no-such-item", text="hi")
    assert items["items"] == []
    assert refused.is_error


def floor_lines(home: Path, sid: str) -> list[dict[str, Any]]:
    path = home / "inbox" / sid / "messages.jsonl"
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


@pytest.mark.slow
async def test_send_from_host_a_lands_on_host_b_floor(
    settings: Settings, tmp_path: Path, start_worker: Callable[..., WorkerProcess]
) -> None:
    a = replace(settings, host="hosta", home=tmp_path / "home-a", agent_inbox=False)
    b = replace(settings, host="hostb", home=tmp_path / "home-b", agent_inbox=False)
    start_worker(b)
    bus_a = Bus(a)
    try:
        bus_a.open_session("caller", handle="hosta:caller")
        bus_a.open_session("onb", handle="hostb:lane", host="hostb")
        async with mcp_client(a, "caller", dispatcher=None) as client:
            answer = ok(await call(client, "send", handle="hostb:lane", text="from a"))
        assert answer["recipient"]["host"] == "hostb"
        wait_for(lambda: floor_lines(b.home, "onb"), what="the line on b's floor")
        [line] = floor_lines(b.home, "onb")
        assert line["id"] == answer["id"]
        assert line["from"] == "hosta:caller" and line["text"] == "from a"
        assert not (a.home / "inbox" / "onb").exists()
    finally:
        bus_a.store.r.close()


def test_the_caller_is_the_tokens_subject_when_authentication_is_on(
    make_bus: Callable[..., Bus],
) -> None:
    from bus.core.errors import Unauthorized
    from bus.surfaces.mcp_server import caller
    from bus.trust.tokens import SCOPE_WRITE, issue

    secret = "mcp-secret-0123456789"
    token = issue(secret, session="alice", scopes=[SCOPE_WRITE])
    assert caller(make_bus(secret=secret, token=token)) == "alice"
    with pytest.raises(Unauthorized):
        caller(make_bus(secret=secret, token=token, session="bob"))
    member = issue(secret, member="acme/dean", scopes=[SCOPE_WRITE])
    with pytest.raises(Unauthorized):
        caller(make_bus(secret=secret, token=member))
    assert caller(make_bus(session="carol")) == "carol"  # no secret: INBOX_SESSION
