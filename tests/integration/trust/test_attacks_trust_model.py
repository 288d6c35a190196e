"""The trust model under attack (docs/security.md), one test per way round it: the attack is
refused and nothing is written (the gateway's own are in test_attacks_gateway.py).

Real Redis, real files, a real uvicorn gateway on a loopback port.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import struct
import subprocess
import sys
import threading
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from bus.api import Bus
from bus.core.errors import BadInput, RateLimited, Refused, Unauthorized
from bus.core.models import now_ms, parse_message
from bus.core.notices import ThreadSummary, notice_line
from bus.core.stamp import render_stamp
from bus.core.threads import thread_id, thread_key
from bus.local.private_files import private_dirs
from bus.ops.embedded import EmbeddedRedis, password_path
from tests.support.gateway_server import Server
from tests.support.pictures import png, png_chunk
from tests.support.trust import SECRET, keys_of, stored, tok
from tests.support.waiting import wait_for

WS = "acme"


@pytest.fixture
def secured(make_bus: Callable[..., Bus]) -> Bus:
    """alice and bob in workspace acme (started by member dean); alice wrote to bob."""
    b = make_bus(secret=SECRET)
    b.items.member_add(WS, "dean")
    dean = tok(member=f"{WS}/dean")  # joining a workspace takes its starter's token
    b.open_session("alice", handle="ha:alice", workspace=WS, starter="dean", token=dean)
    b.open_session("bob", handle="ha:bob", workspace=WS, starter="dean", token=dean)
    b.open_session("mallory", handle="ha:mallory")
    b.send({"to_id": "bob", "text": "the secret plan"}, token=tok(session="alice"))
    b.deliver_session("bob")
    return b


def bobs_thread(b: Bus) -> str:
    return str(b.threads("bob", token=tok(session="bob"))["threads"][0]["threadId"])


# 1 ------------------------------------------------------------------------------------------


def test_1_a_member_token_never_acts_as_a_session(secured: Bus, tmp_path: Path) -> None:
    thread = bobs_thread(secured)
    eve = tok(member="elsewhere/eve")  # a member of no workspace
    dean = tok(member=f"{WS}/dean")  # even an active member of bob's workspace
    (tmp_path / "p.png").write_bytes(png())
    before = keys_of(secured), stored(secured, "alice"), stored(secured, "bob")
    for token in (eve, dean):
        for call in (
            lambda t=token: secured.threads("bob", token=t),
            lambda t=token: secured.read("bob", thread, token=t),
            lambda t=token: secured.reply("bob", thread, "as bob", token=t),
            lambda t=token: secured.item_post("bob", "k", title="as bob", token=t),
            lambda t=token: secured.reply_inbox(
                "bob", "k", text="x", image_paths=["p.png"], root=tmp_path, token=t
            ),
            lambda t=token: secured.send(
                {"to_id": "alice", "text": "hi", "from_session": "bob"}, token=t
            ),
        ):
            with pytest.raises(Unauthorized):
                call()
    with pytest.raises(Unauthorized) as err:
        secured.read_inbox("bob", token=eve)  # not a member of acme
    assert err.value.code == "token_subject"
    after = keys_of(secured), stored(secured, "alice"), stored(secured, "bob")
    assert after == before
    assert not (Path(secured.settings.home) / "items").exists()


# 2 ------------------------------------------------------------------------------------------


def test_2_naming_a_thread_does_not_make_you_a_party(secured: Bus) -> None:
    # Mallory computes alice->bob's thread id, as anyone can.
    computed = thread_id(
        "bob", thread_key(thread=None, pr=None, topic=None, sender="ha:alice", text="")
    )
    assert computed == bobs_thread(secured)
    mallory = tok(session="mallory")
    with pytest.raises(Refused) as err:
        secured.send({"to_id": "bob", "text": "let me in", "thread": computed}, token=mallory)
    assert err.value.code == "not_a_party"
    assert stored(secured, "bob") == 1
    # Even a message that reached the thread's log another way never adds its sender.
    secured.post(
        parse_message(
            {
                "from": "ha:mallory",
                "from_session": "mallory",
                "to_id": "bob",
                "text": "sneaky",
                "thread": computed,
            }
        )
    )
    secured.deliver_session("bob")
    assert sorted(secured.conversation.parties(computed)) == ["alice", "bob"]
    for call in (
        lambda: secured.read("mallory", computed, token=mallory),
        lambda: secured.reply("mallory", computed, "hi all", token=mallory),
    ):
        with pytest.raises(Refused) as err:
            call()
        assert err.value.code == "not_a_party"
    # bob's reply goes to the parties only.
    out = secured.reply("bob", computed, "to alice", token=tok(session="bob"))
    assert out["to"] == ["alice"] and stored(secured, "mallory") == 0


# 3 ------------------------------------------------------------------------------------------


def test_3_a_handle_held_by_an_open_session_cannot_be_taken(secured: Bus) -> None:
    before = keys_of(secured)
    with pytest.raises(Refused) as err:
        secured.open_session("mallory2", handle="ha:alice")
    assert err.value.code == "handle_taken" and err.value.details["holder"] == "alice"
    assert keys_of(secured) == before
    # Once alice's session is closed, the handle is free again.
    secured.close_session("alice")
    assert secured.open_session("alice2", handle="ha:alice")["ok"] is True


def test_3_a_stale_holder_gives_its_handle_up(make_bus: Callable[..., Bus]) -> None:
    b = make_bus(stale_s=60.0)
    b.open_session("old", handle="ha:x")
    b.store.r.hset(b.store.k.s("old", "session"), "last_seen", 1)  # not seen for ages
    assert b.open_session("new", handle="ha:x")["ok"] is True


# 7 ------------------------------------------------------------------------------------------


def test_7_labels_lose_format_characters_and_confusable_handles_are_refused(bus: Bus) -> None:
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


# 8 ------------------------------------------------------------------------------------------


def test_8_notices_and_read_say_whether_the_sender_was_verified(secured: Bus) -> None:
    secured.turn("bob", "start")
    secured.deliver_session("bob")
    [notice] = secured.drain("bob")
    assert notice["notice"]["threads"][0]["verified"] is True
    assert "unverified" not in notice["text"]
    [msg] = secured.read("bob", bobs_thread(secured), token=tok(session="bob"))["messages"]
    assert msg["verified"] is True


def test_8_an_unverified_sender_is_marked(bus: Bus) -> None:
    bus.open_session("s1")
    bus.turn("s1", "start")
    bus.send({"from": "ha:who", "to_id": "s1", "text": "trust me"})
    bus.deliver_session("s1")
    [notice] = bus.drain("s1")
    assert notice["notice"]["threads"][0]["verified"] is False
    assert "ha:who unverified" in notice["text"]
    thread = notice["notice"]["threads"][0]["thread"]
    [msg] = bus.read("s1", thread)["messages"]
    assert msg["verified"] is False


# 9 ------------------------------------------------------------------------------------------


def test_9_a_wake_command_gets_no_secrets(
    bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INBOX_SECRET", "do-not-leak")
    monkeypatch.setenv("INBOX_TOKEN", "do-not-leak-either")
    out = tmp_path / "env.json"
    script = tmp_path / "dump.py"
    script.write_text(
        "import json, os, sys\n"
        f"json.dump({{'env': dict(os.environ), 'stdin': sys.stdin.read()}}, open({str(out)!r}, 'w'))\n"
    )
    # A plain command line: run without a shell.
    bus.open_session("sleeper", wake_cmd=f"{sys.executable} {script}")
    summary = ThreadSummary(thread="thr_aaaa", label="deploy", count=1, senders=["h:a"])
    line = notice_line("n1", "sleeper", [summary], ["m1"], now_ms())
    bus.inbox.notices.run_wake_cmd("sleeper", line)
    # Started and left to run (bus.delivery.wake_cmd): its output comes when it is done.
    wait_for(lambda: out.exists() and out.read_text().endswith("}"), 30, what="the dump")
    got = json.loads(out.read_text())
    assert got["stdin"] == line["text"]  # the notice, as the woken turn's prompt
    assert "INBOX_SECRET" not in got["env"] and "INBOX_TOKEN" not in got["env"]
    # The opener's PATH (kept with the command), each folder once.
    folders = [f for f in os.environ["PATH"].split(":") if f]
    assert got["env"].get("PATH") == ":".join(dict.fromkeys(folders))


# 10 -----------------------------------------------------------------------------------------


@pytest.fixture
def agent(bus: Bus) -> Bus:
    bus.items.member_add(WS, "dean")
    bus.open_session("agent", workspace=WS, starter="dean")
    bus.item_post("agent", "k", title="look")
    return bus


ROUNDS = 1000


def test_10_pictures_swapped_for_links_are_never_read_outside_the_root(
    agent: Bus, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    inside, outside = png((0, 255, 0)), png((255, 0, 0))
    (root / "sub" / "p.png").write_bytes(inside)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "p.png").write_bytes(outside)
    real_sub, link_tmp = root / "sub.real", root / "sub.link"
    stop = threading.Event()

    def flip() -> None:
        # Swap root/sub between a real directory and a link to elsewhere, atomically.
        os.rename(root / "sub", real_sub)
        while not stop.is_set():
            os.symlink(elsewhere, link_tmp)
            os.replace(link_tmp, root / "sub")  # sub -> elsewhere
            os.unlink(root / "sub")
            os.rename(real_sub, root / "sub")  # sub is the real directory
            os.rename(root / "sub", real_sub)
        if not (root / "sub").exists():
            os.rename(real_sub, root / "sub")

    flipper = threading.Thread(target=flip, daemon=True)
    # Switch threads as often as possible, so the swap lands inside the check's window.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    flipper.start()
    ok = refused = 0
    try:
        for _ in range(ROUNDS):
            try:
                agent.reply_inbox("agent", "k", image_paths=["sub/p.png"], root=root)
                ok += 1
            except BadInput:
                refused += 1
    finally:
        sys.setswitchinterval(interval)
        stop.set()
        flipper.join(10)
    kept = sorted((Path(agent.settings.home) / "items" / "agent" / "k" / "files").glob("*"))
    assert all(p.read_bytes() == inside for p in kept)  # zero reads outside the root
    assert ok + refused == ROUNDS


def test_10_a_script_under_a_png_header_and_a_bomb_are_refused(agent: Bus, tmp_path: Path) -> None:
    (tmp_path / "script.png").write_bytes(b"\x89PNG\r\n\x1a\n#!/bin/sh\nrm -rf ~\n")
    ihdr = struct.pack(">IIBBBBB", 100_000, 100_000, 8, 2, 0, 0, 0)
    bomb = (
        b"\x89PNG\r\n\x1a\n"
        + png_chunk(b"IHDR", ihdr)
        + png_chunk(b"IDAT", zlib.compress(b"\0" * 64))
        + png_chunk(b"IEND", b"")
    )
    (tmp_path / "bomb.png").write_bytes(bomb)
    for name, code in (("script.png", "not_a_picture"), ("bomb.png", "picture_too_large")):
        with pytest.raises(BadInput) as err:
            agent.reply_inbox("agent", "k", text="see", image_paths=[name], root=tmp_path)
        assert err.value.code == code
    assert not (Path(agent.settings.home) / "items").exists()
    assert agent.items.read_inbox("agent")["items"][0]["thread"] == []


# 11 -----------------------------------------------------------------------------------------


def mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_11_files_are_private(agent: Bus, tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        (tmp_path / "p.png").write_bytes(png())
        agent.reply_inbox("agent", "k", image_paths=["p.png"], root=tmp_path)
        home = Path(agent.settings.home)
        for d in (home / "items", home / "items" / "agent", home / "items" / "agent" / "k"):
            assert mode(d) == 0o700, d
        [f] = (home / "items" / "agent" / "k" / "files").iterdir()
        assert mode(f) == 0o600
        fresh = private_dirs(tmp_path / "new-home" / "a")
        assert mode(fresh) == mode(fresh.parent) == 0o700
    finally:
        os.umask(old)


def test_11_the_embedded_redis_on_tcp_needs_its_password(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    home = tmp_path / "h"
    sock = home / "redis" / "redis.sock"
    with EmbeddedRedis(sock, home / "redis", port=port, persist=False) as server:
        pw = password_path(sock)
        assert mode(pw) == 0o600 and mode(home) == 0o700
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=port).ping()
        c = redis.Redis(port=port, password=server.password)
        assert c.ping()
        with pytest.raises(redis.exceptions.NoPermissionError):
            c.config_get("dir")
        c.close()
        from bus.core.settings import Settings

        assert redis.Redis.from_url(Settings(home=home).store_url()).ping()


# 12 -----------------------------------------------------------------------------------------


def test_12_a_sender_over_its_rate_is_refused(make_bus: Callable[..., Bus]) -> None:
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


def test_12_a_full_inbox_refuses_and_drops_nothing(
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


def test_12_the_cli_exits_non_zero_when_rate_limited(bus: Bus) -> None:
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


def test_12_prox_door_is_bounded_too(
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
