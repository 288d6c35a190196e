"""A member token against every session-scoped operation, on every surface.

A member token acts only on items of sessions in its workspace while the member is
active; it never reads a session's threads or writes, replies or decides as a session.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bus.api import Bus
from bus.core.errors import Refused, Unauthorized
from bus.core.settings import Settings
from bus.surfaces.http.gateway import create_app
from bus.trust.tokens import SCOPE_OPERATOR, SCOPE_READ, SCOPE_THREAD, SCOPE_WRITE, issue
from tests.support.cli import inbox as cli
from tests.support.gateway_server import Server
from tests.support.mcp_client import call, mcp_client
from tests.support.pictures import png

SECRET = "scopes-secret-0123456789"
ALL = (SCOPE_READ, SCOPE_WRITE, SCOPE_THREAD)
WS = "acme"


def tok(**kw: Any) -> str:
    return issue(SECRET, scopes=ALL, **kw)


MEMBER = tok(member=f"{WS}/dean")  # an active member of bob's own workspace


def keys_of(b: Bus) -> dict[str, str]:
    """Every key of this test with its type and size: what a refused call must not touch."""
    out = {}
    for k in b.store.r.scan_iter(match=b.store.k.pattern(), count=1000):
        if b.store.r.pttl(k) > 0:
            continue  # a dispatch flag or a rate bucket expiring on its own
        kind = b.store.r.type(k)
        size = {
            "stream": b.store.r.xlen,
            "hash": b.store.r.hlen,
            "set": b.store.r.scard,
            "zset": b.store.r.zcard,
            "list": b.store.r.llen,
        }.get(kind, b.store.r.strlen)(k)
        out[str(k)] = f"{kind}:{size}"
    return out


@pytest.fixture
def world(make_bus: Callable[..., Bus], tmp_path: Path) -> tuple[Bus, str, str]:
    """alice wrote to bob (both in acme, started by dean); bob has an item and asked alice
    for a task. Returns (bus, bob's thread with alice, a typed request thread)."""
    b = make_bus(secret=SECRET)
    b.items.member_add(WS, "dean")
    b.open_session("alice", handle="ha:alice", workspace=WS, starter="dean", token=MEMBER)
    b.open_session("bob", handle="ha:bob", workspace=WS, starter="dean", token=MEMBER)
    b.send({"to_id": "bob", "text": "hi bob"}, token=tok(session="alice"))
    b.deliver_session("bob")
    thread = b.threads("bob", token=tok(session="bob"))["threads"][0]["threadId"]
    b.item_post("bob", "k", title="look", token=tok(session="bob"))
    req = b.request("alice", "task", "do it", token=tok(session="bob"))
    (tmp_path / "p.png").write_bytes(png())
    return b, thread, req["thread"]


def api_calls(b: Bus, thread: str, req: str, root: Path) -> dict[str, Callable[[], Any]]:
    t = MEMBER
    return {
        "threads": lambda: b.threads("bob", token=t),
        "read": lambda: b.read("bob", thread, token=t),
        "read --mark-read": lambda: b.read("bob", thread, mark_read=True, token=t),
        "reply": lambda: b.reply("bob", thread, "as bob", token=t),
        "withdraw": lambda: b.withdraw("nope", "bob", token=t),
        "send as bob": lambda: b.send(
            {"to_id": "alice", "text": "x", "from_session": "bob"}, token=t
        ),
        "send from bob's handle": lambda: b.send(
            {"to_id": "alice", "text": "x", "from": "ha:bob"}, token=t
        ),
        "request": lambda: b.request("alice", "task", "x", actor="bob", token=t),
        "decide": lambda: b.decide(req, "withdraw", token=t),
        "item_post": lambda: b.item_post("bob", "k2", title="x", token=t),
        "reply_inbox": lambda: b.reply_inbox(
            "bob", "k", text="x", image_paths=["p.png"], root=root, token=t
        ),
        "session open": lambda: b.open_session("bob", handle="ha:bob", token=t),
        "session close": lambda: b.close_session("bob", token=t),
        "turn": lambda: b.turn("bob", "start", token=t),
    }


def test_python_api_refuses_a_member_token_as_a_session(
    world: tuple[Bus, str, str], tmp_path: Path
) -> None:
    b, thread, req = world
    before = keys_of(b)
    for name, fn in api_calls(b, thread, req, tmp_path).items():
        with pytest.raises(Unauthorized) as err:
            fn()
        assert err.value.code in ("token_subject", "forged_from"), name
    assert keys_of(b) == before
    assert not (Path(b.settings.home) / "items").exists()


def test_a_member_token_acts_on_items_of_its_workspace_while_active(
    world: tuple[Bus, str, str], make_bus: Callable[..., Bus]
) -> None:
    b, _thread, _req = world
    assert [i["key"] for i in b.read_inbox("bob", token=MEMBER)["items"]] == ["k"]
    b.item_write("bob", "k", member="dean", text="looks fine", token=MEMBER)
    b.item_settle("bob", "k", member="dean", answer="yes", token=MEMBER)
    # Another workspace's session is not its business.
    op = issue(SECRET, operator="root", scopes=[SCOPE_OPERATOR])
    b.open_session("carol", handle="ha:carol", workspace="other", starter="zed", token=op)
    with pytest.raises(Unauthorized):
        b.read_inbox("carol", token=MEMBER)
    # Once the member is removed, the token does nothing.
    b.items.member_remove(WS, "dean")
    before = keys_of(b)
    for fn in (
        lambda: b.read_inbox("bob", token=MEMBER),
        lambda: b.item_write("bob", "k", member="dean", text="still here?", token=MEMBER),
        lambda: b.item_settle("bob", "k", member="dean", answer="no", token=MEMBER),
        lambda: b.send({"to_id": "bob", "text": "hi"}, token=MEMBER),
    ):
        with pytest.raises((Unauthorized, Refused)):
            fn()
    assert keys_of(b) == before


def test_a_session_token_acts_only_as_its_session(world: tuple[Bus, str, str]) -> None:
    b, thread, _req = world
    alice = tok(session="alice")
    before = keys_of(b)
    for fn in (
        lambda: b.threads("bob", token=alice),
        lambda: b.read("bob", thread, token=alice),
        lambda: b.reply("bob", thread, "x", token=alice),
        lambda: b.item_post("bob", "k3", title="x", token=alice),
        lambda: b.read_inbox("bob", token=alice),
        lambda: b.item_write("bob", "k", member="dean", text="x", token=alice),
        lambda: b.turn("bob", "start", token=alice),
        lambda: b.close_session("bob", token=alice),
    ):
        with pytest.raises(Unauthorized):
            fn()
    assert keys_of(b) == before


@pytest.mark.slow
def test_cli_refuses_a_member_token_as_a_session(
    world: tuple[Bus, str, str], tmp_path: Path
) -> None:
    b, thread, req = world
    env = b.settings.child_env()
    env.update(
        {
            "INBOX_SECRET": SECRET,
            "INBOX_TOKEN": MEMBER,
            "INBOX_SESSION": "bob",
            "INBOX_DISPATCHER": "none",
        }
    )
    before = keys_of(b)
    commands = [
        ["threads", "bob"],
        ["read", "bob", thread],
        ["read", "bob", thread, "--mark-read"],
        ["reply", "bob", thread, "--text", "as bob"],
        ["withdraw", "nope", "--by", "bob"],
        ["send", "--to-id", "alice", "--from", "ha:bob", "--text", "x"],
        ["request", "--to-id", "alice", "--type", "task", "--text", "x"],
        ["decide", req, "withdraw"],
        ["item", "post", "bob", "k2", "--title", "x"],
        ["reply-inbox", "bob", "k", "--text", "x"],
        ["session", "open", "bob", "--handle", "ha:bob"],
        ["session", "close", "bob"],
        ["turn", "bob", "start"],
    ]
    for args in commands:
        out = cli(env, *args)
        assert out.returncode != 0, args
        assert json.loads(out.stdout)["error"] in ("token_subject", "forged_from"), args
        assert len(out.stderr.strip().splitlines()) == 1, args
    assert keys_of(b) == before


def test_http_refuses_a_member_token_as_a_session(world: tuple[Bus, str, str]) -> None:
    b, _thread, _req = world
    before = keys_of(b)
    server = Server(create_app(b))
    try:
        auth = {"authorization": f"Bearer {MEMBER}"}
        for path in ("/v1/send", "/send"):
            for body in (
                {"to_id": "alice", "text": "x", "from_session": "bob"},
                {"to_id": "alice", "text": "x", "from": "ha:bob"},
            ):
                r = server.client.post(path, json=body, headers=auth)
                assert r.status_code == 401, (path, body, r.text)
    finally:
        server.stop()
    assert keys_of(b) == before
    assert not b.floor.peek("alice")  # nothing on its floor


@pytest.mark.slow
@pytest.mark.anyio
async def test_mcp_refuses_a_member_token_as_a_session(
    world: tuple[Bus, str, str], settings: Settings, tmp_path: Path
) -> None:
    b, thread, req = world
    s = replace(settings, secret=SECRET, token=MEMBER)
    before = keys_of(b)
    async with mcp_client(s, "bob") as client:
        for tool, args in (
            ("threads", {}),
            ("read", {"thread": thread}),
            ("reply", {"thread": thread, "text": "as bob"}),
            ("withdraw", {"message_id": "nope"}),
            ("send", {"to_id": "alice", "text": "x"}),
            ("inbox", {"consume": True}),
            ("decide", {"thread_id": req, "decision": "withdraw"}),
            ("read_inbox", {}),
            ("reply_inbox", {"key": "k", "text": "x"}),
        ):
            result = await call(client, tool, **args)
            assert result.is_error, tool
            assert result.structured_content is not None
            assert result.structured_content["error"] == "token_subject", tool
    assert keys_of(b) == before
