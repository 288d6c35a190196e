"""Attacks by volume (docs/security.md's policy decisions and trust model): a sender over
its rate on every door, a full inbox, pictures over their quota, prox's door, the takers'
setting against a live holder. Each flood is refused and nothing is dropped or written.

Real Redis, real files, a real uvicorn gateway on a loopback port, the CLI as a child.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bus.api import Bus
from bus.core.errors import RateLimited, Refused
from tests.support.cli import inbox_as
from tests.support.gateway_server import Server
from tests.support.pictures import png
from tests.support.trust import SECRET, stored, tok


def test_items_and_requests_spend_from_the_senders_bucket(
    make_bus: Callable[..., Bus], tmp_path: Path
) -> None:
    b = make_bus(send_rate=0.001, send_burst=2)
    b.items.member_add("acme", "dean")
    b.open_session("agent", workspace="acme", starter="dean")
    b.open_session("peer")
    calls: list[Callable[[int], Any]] = [
        lambda i: b.item_post("agent", f"k{i}", title="t"),
        lambda i: b.item_write("agent", "k0", member="dean", text=f"w{i}"),
        lambda i: b.request("peer", "task", f"r{i}", actor="agent"),
    ]
    for call in calls:
        for key in b.store.r.keys(f"{b.settings.key_prefix}:{{snd:*"):
            b.store.r.delete(key)  # a full bucket for each kind of call
        call(0)
        call(1)
        with pytest.raises(RateLimited) as err:
            call(2)
        assert err.value.code == "rate_limited"
    assert sorted(i["key"] for i in b.store.items.items_of("agent")) == ["k0", "k1"]


def test_pictures_have_a_per_session_quota(make_bus: Callable[..., Bus], tmp_path: Path) -> None:
    picture = png()
    b = make_bus(max_picture_bytes=3 * len(picture))
    b.items.member_add("acme", "dean")
    b.open_session("agent", workspace="acme", starter="dean")
    b.item_post("agent", "k", title="t")
    (tmp_path / "p.png").write_bytes(picture)
    (tmp_path / "q.png").write_bytes(picture)
    two_pictures = ["p.png", "q.png"]
    b.reply_inbox("agent", "k", image_paths=two_pictures, root=tmp_path)
    for write in (
        lambda: b.reply_inbox("agent", "k", image_paths=two_pictures, root=tmp_path),
        lambda: b.item_write("agent", "k", member="dean", image_paths=two_pictures, root=tmp_path),
    ):
        with pytest.raises(RateLimited) as err:
            write()
        assert err.value.code == "picture_quota"
    kept = list((Path(b.settings.home) / "items" / "agent" / "k" / "files").iterdir())
    assert len(kept) == 2


def test_send_and_v1_send_share_one_bucket(
    two: Bus, serve: Callable[..., Server], make_bus: Callable[..., Bus]
) -> None:
    b = make_bus(secret=SECRET, send_rate=0.001, send_burst=2)
    b.open_session("alice", handle="ha:alice")
    b.open_session("s1")
    gw = serve(b).client
    auth = {"authorization": f"Bearer {tok(session='alice')}"}
    codes = [
        gw.post(path, json={"to_id": "s1", "text": "x"}, headers=auth).status_code
        for path in ("/send", "/v1/send", "/send", "/v1/send")
    ]
    assert codes == [200, 200, 429, 429]


def test_prox_door_keeps_the_unread_cap_and_makes_no_folders(
    make_bus: Callable[..., Bus], serve: Callable[..., Server]
) -> None:
    b = make_bus(max_unread=2)
    b.open_session("s1")
    gw = serve(b).client
    codes = [
        gw.post("/send", json={"from": f"h:s{i}", "to_id": "s1", "text": "x"}).status_code
        for i in range(3)
    ]
    assert codes == [200, 200, 429]
    assert len(b.floor.peek("s1")) == 2
    r = gw.post("/send", json={"from": "h:x", "to_id": "nobody", "text": "x"})
    assert r.status_code == 404 and r.json()["ok"] is False
    assert not (Path(b.settings.home) / "inbox" / "nobody").exists()


def test_the_takers_setting_cannot_make_a_live_holder_stale(two: Bus) -> None:
    seen = two.clock.now_ms() - 5000  # bob's harness was seen 5 s ago
    two.store.sessions.touch_seen("bob", seen)
    out = inbox_as(
        two.settings, "session", "open", "bobby", "--handle", "ha:bob", INBOX_STALE_S="1"
    )
    assert out.returncode != 0 and json.loads(out.stdout)["error"] == "handle_taken"
    with pytest.raises(Refused):
        two.with_settings(replace(two.settings, stale_s=1.0)).open_session("bobby", handle="ha:bob")
    assert two.store.sessions.get_session("bobby") is None
    assert two.resolve("ha:bob").session == "bob"


def test_a_sender_over_its_rate_is_refused(make_bus: Callable[..., Bus]) -> None:
    b = make_bus(send_rate=0.001, send_burst=3)
    b.open_session("s1")
    for i in range(3):
        b.send({"from": "h:flood", "to_id": "s1", "text": f"m{i}"})
    with pytest.raises(RateLimited) as err:
        b.send({"from": "h:flood", "to_id": "s1", "text": "one too many"})
    assert err.value.code == "rate_limited"
    assert stored(b, "s1") == 3
    # Another sender has its own bucket.
    assert b.send({"from": "h:calm", "to_id": "s1", "text": "hi"})["state"] == "stored"


def test_a_full_inbox_refuses_and_drops_nothing(
    make_bus: Callable[..., Bus], serve: Callable[..., Server]
) -> None:
    b = make_bus(max_unread=3)
    b.open_session("s1")
    ids = [b.send({"from": f"h:s{i}", "to_id": "s1", "text": "x"})["id"] for i in range(3)]
    with pytest.raises(RateLimited) as err:
        b.send({"from": "h:s9", "to_id": "s1", "text": "no room"})
    assert err.value.code == "inbox_full"
    r = serve(b).client.post("/v1/send", json={"from": "h:s8", "to_id": "s1", "text": "no room"})
    assert r.status_code == 429 and r.json()["error"] == "inbox_full"
    b.deliver_session("s1")
    assert sorted(
        json.loads(v)["id"] for v in b.store.r.hvals(b.store.k.s("s1", "msgs"))
    ) == sorted(ids)


def test_the_cli_exits_non_zero_when_rate_limited(bus: Bus) -> None:
    bus.open_session("s1")
    env = bus.settings.child_env()
    env.update({"INBOX_DISPATCHER": "none", "INBOX_SEND_RATE": "0.001", "INBOX_SEND_BURST": "1"})
    cmd = [
        sys.executable,
        "-m",
        "bus.surfaces.cli.app",
        "send",
        "--to-id",
        "s1",
        "--from",
        "h:me",
        "--text",
        "x",
    ]
    first = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    second = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert first.returncode == 0, first.stderr
    assert second.returncode == 4 and json.loads(second.stdout)["error"] == "rate_limited"
    assert stored(bus, "s1") == 1


def test_prox_door_is_bounded_too(
    make_bus: Callable[..., Bus], serve: Callable[..., Server]
) -> None:
    b = make_bus(send_rate=0.001, send_burst=2)
    b.open_session("s1")
    gw = serve(b).client
    codes = [
        gw.post("/send", json={"from": "h:flood", "to_id": "s1", "text": f"m{i}"}).status_code
        for i in range(3)
    ]
    assert codes == [200, 200, 429]
    floor = Path(b.settings.home) / "inbox" / "s1" / "messages.jsonl"
    assert len(floor.read_text().splitlines()) == 2
