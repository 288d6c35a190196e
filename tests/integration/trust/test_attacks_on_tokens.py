"""Attacks on who may act as whom (docs/security.md, "The trust model" and its policy
decisions): a member token acting as a session, a stranger naming a thread, another
sender's id, a session's workspace, a removed member, verified and unverified senders.
Each attack is refused and nothing is written.

Real Redis, real files, a real uvicorn gateway on a loopback port, the CLI as a child.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from bus.api import Bus
from bus.core.errors import NotFound, Refused, Unauthorized
from bus.core.models import parse_message
from bus.core.threads import thread_id, thread_key
from bus.delivery.floor import Floor
from bus.surfaces.harness.listener import Listener
from bus.surfaces.http.gateway import create_app
from bus.trust.tokens import SCOPE_OPERATOR, issue
from tests.support.cli import inbox_as
from tests.support.gateway_server import Server, app_client, bearer
from tests.support.pictures import png
from tests.support.trust import ALL, DEAN, ERIN, SECRET, WS, keys_of, stored, tok
from tests.support.waiting import wait_for


def bobs_thread(b: Bus) -> str:
    return str(b.threads("bob", token=tok(session="bob"))["threads"][0]["threadId"])


def test_a_member_sends_only_into_its_own_workspace(two: Bus, serve: Callable[..., Server]) -> None:
    dean = tok(member="acme/dean")
    gw = serve(two).client
    auth = {"authorization": f"Bearer {dean}"}
    for to in ("other", "loner", "nobody"):
        with pytest.raises(Refused) as err:
            two.send({"to_id": to, "text": "hi"}, token=dean)
        assert err.value.code == "not_your_workspace"
        r = gw.post("/v1/send", json={"to_id": to, "text": "hi"}, headers=auth)
        assert r.status_code == 403 and r.json()["error"] == "not_your_workspace"
        r = gw.post("/send", json={"to_id": to, "text": "hi"}, headers=auth)
        assert r.status_code == 403 and r.json()["ok"] is False
        r = gw.post("/v1/send/batch", json=[{"to_id": to, "text": "hi"}], headers=auth)
        assert r.status_code == 400
    out = inbox_as(two.settings, "send", "--to-id", "other", "--text", "hi", INBOX_TOKEN=dean)
    assert out.returncode != 0 and json.loads(out.stdout)["error"] == "not_your_workspace"
    assert stored(two, "other") == stored(two, "loner") == 0
    assert not two.floor.peek("other") and not two.floor.session_dir("nobody").exists()
    # Its own workspace's sessions it reaches.
    assert two.send({"to_id": "bob", "text": "hi"}, token=dean)["state"] == "stored"


def test_another_senders_id_is_refused_not_squatted(two: Bus, serve: Callable[..., Server]) -> None:
    two.open_session("alice", handle="ha:alice", workspace="acme", starter="dean", token=DEAN)
    two.open_session("carol", handle="ha:carol", workspace="acme", starter="dean", token=DEAN)
    alice, carol = tok(session="alice"), tok(session="carol")
    first = two.send({"id": "release-approval-42", "to_id": "bob", "text": "EVIL"}, token=alice)
    assert first["state"] == "stored"
    for to in ("bob", "other"):
        with pytest.raises(Refused) as err:
            two.send({"id": "release-approval-42", "to_id": to, "text": "real"}, token=carol)
        assert err.value.code == "id_taken"
    gw = serve(two).client
    body = {"id": "release-approval-42", "to_id": "bob", "text": "real"}
    r = gw.post("/v1/send", json=body, headers={"authorization": f"Bearer {carol}"})
    assert r.status_code == 403 and r.json()["error"] == "id_taken"
    r = gw.post("/v1/send/batch", json=[body], headers={"authorization": f"Bearer {carol}"})
    assert r.status_code == 400 and r.json()["errors"][0]["error"] == "id_taken"
    assert stored(two, "bob") == 1 and stored(two, "other") == 0
    # alice's receipt is still hers, and her own resend is still a duplicate.
    assert two.receipt("release-approval-42", token=alice)["to"] == "bob"
    again = two.send({"id": "release-approval-42", "to_id": "bob", "text": "EVIL"}, token=alice)
    assert again.get("duplicate") is True


def test_a_sessions_workspace_is_fixed_once_set(two: Bus, serve: Callable[..., Server]) -> None:
    two.item_post("other", "secretplan", title="beta's plan", token=tok(session="other"))
    with pytest.raises(Refused) as err:
        two.open_session("other", workspace="acme", starter="dean")
    assert err.value.code == "workspace_fixed"
    out = inbox_as(
        two.settings, "session", "open", "other", "--workspace", "acme", "--starter", "dean"
    )
    assert out.returncode != 0 and json.loads(out.stdout)["error"] == "workspace_fixed"
    two.open_session("other", handle="hb:other")  # a harness restart keeps the workspace
    assert two.session("other").workspace == "beta"
    with pytest.raises(Unauthorized):
        two.read_inbox("other", token=tok(member="acme/dean"))
    app = TestClient(create_app(two), base_url="http://127.0.0.1", follow_redirects=False)
    dean_link = two.member_link("acme/dean")["token"]
    app.get(f"/ui/login?token={dean_link}", headers={"sec-fetch-site": "none"})
    assert app.get("/ui/items/other/secretplan").status_code == 403
    # An operator may move it.
    op = issue(SECRET, operator="root", scopes=[SCOPE_OPERATOR])
    two.open_session("other", workspace="acme", starter="dean", token=op)
    assert two.session("other").workspace == "acme"


def test_joining_a_workspace_takes_its_starters_or_an_operators_token(two: Bus) -> None:
    """No token, a session's own token, another member's or another workspace's member's
    cannot put a new (or a workspace-less) session into acme as started by dean."""
    two.open_session("newbie")
    refusals = [
        ("newbie", None, "token_missing"),  # the session exists, in no workspace
        ("fresh", None, "token_missing"),  # a new session
        ("newbie", tok(session="newbie"), "not_your_workspace"),
        ("fresh", ERIN, "not_your_workspace"),  # beta's member
        ("fresh", tok(member="acme/luke"), "member_inactive"),  # not a member at all
    ]
    two.items.member_add("acme", "mia")
    refusals.append(("fresh", tok(member="acme/mia"), "not_your_workspace"))  # not the starter
    for sid, token, code in refusals:
        with pytest.raises((Refused, Unauthorized)) as err:
            two.open_session(sid, workspace="acme", starter="dean", token=token)
        assert err.value.code == code, (sid, code)
    assert two.store.sessions.get_session("fresh") is None
    assert two.session("newbie").workspace is None
    out = inbox_as(
        two.settings, "session", "open", "fresh", "--workspace", "acme", "--starter", "dean"
    )
    assert out.returncode != 0 and json.loads(out.stdout)["error"] == "token_missing"
    # A member token serves only a join: it never re-registers a session.
    with pytest.raises(Unauthorized):
        two.open_session("loner", token=DEAN)
    # Another starter on a session already in acme is a join too.
    with pytest.raises(Unauthorized):
        two.open_session("bob", handle="ha:bob", starter="mia")
    assert two.session("bob").starter == "dean"
    # The starter's token, an operator's, and a restart as registered (no token) may.
    out = inbox_as(
        two.settings,
        "session",
        "open",
        "fresh",
        "--workspace",
        "acme",
        "--starter",
        "dean",
        INBOX_TOKEN=DEAN,
    )
    assert out.returncode == 0, out.stderr
    op = issue(SECRET, operator="root", scopes=[SCOPE_OPERATOR])
    two.open_session("newbie", workspace="acme", starter="mia", token=op)
    two.open_session("bob", handle="ha:bob")
    two.open_session("bob", handle="ha:bob", workspace="acme", starter="dean")
    assert [two.session(s).workspace for s in ("fresh", "newbie", "bob")] == ["acme"] * 3


def test_removing_a_member_kills_its_tokens_for_good(two: Bus) -> None:
    old = tok(member="acme/dean")
    link = two.member_link("acme/dean")["token"]
    two.items.member_remove("acme", "dean")
    two.items.member_add("acme", "dean")
    for token in (old, link):
        with pytest.raises(Unauthorized) as err:
            two.read_inbox("bob", token=token)
        assert err.value.code == "token_revoked"
    client = TestClient(create_app(two), base_url="http://127.0.0.1", follow_redirects=False)
    r = client.get(f"/ui/login?token={link}", headers={"sec-fetch-site": "none"})
    assert r.status_code == 401 and "inbox_ui=" not in r.headers.get("set-cookie", "")
    fresh = two.issue_token(member="acme/dean", scopes=list(ALL))["token"]
    assert two.read_inbox("bob", token=fresh)["items"] == []


def test_prox_send_refuses_another_senders_id(bus: Bus) -> None:
    bus.open_session("victim")
    gw = app_client(bus)
    first = {"from": "h:mallory", "to_id": "victim", "text": "squat", "id": "deploy-42"}
    assert gw.post("/send", json=first).json()["ok"] is True
    r = gw.post("/send", json={**first, "from": "h:alice", "text": "the real deploy"})
    assert r.status_code == 403 and r.json()["error"] == "id_taken"
    assert gw.post("/send", json=first).json()["ok"] is True  # its sender's again: its own
    assert [o["from"] for o in bus.floor.peek("victim")] == ["h:mallory", "h:mallory"]


def test_a_listener_and_a_drain_tell_senders_apart(tmp_path: Path) -> None:
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


def test_a_receipt_says_the_same_of_another_senders_id_and_an_unknown_one(two: Bus) -> None:
    sent = two.send({"to_id": "bob", "text": "hi"}, token=tok(session="other"))
    answers = []
    for msg_id in (sent["id"], "no-such-message"):
        with pytest.raises(NotFound) as err:
            two.receipt(msg_id, token=tok(session="loner"))
        answers.append((err.value.code, str(err.value).replace(msg_id, "ID")))
    assert answers[0] == answers[1]
    gw = app_client(two)
    codes = [
        gw.get(f"/v1/messages/{i}", headers=bearer(tok(session="loner"))).status_code
        for i in (sent["id"], "no-such-message")
    ]
    assert codes == [404, 404]


def test_a_member_token_never_acts_as_a_session(secured: Bus, tmp_path: Path) -> None:
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


def test_naming_a_thread_does_not_make_you_a_party(secured: Bus) -> None:
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


def test_notices_and_read_say_whether_the_sender_was_verified(secured: Bus) -> None:
    secured.turn("bob", "start")
    secured.deliver_session("bob")
    [notice] = secured.drain("bob")
    assert notice["notice"]["threads"][0]["verified"] is True
    assert "unverified" not in notice["text"]
    [msg] = secured.read("bob", bobs_thread(secured), token=tok(session="bob"))["messages"]
    assert msg["verified"] is True


def test_an_unverified_sender_is_marked(bus: Bus) -> None:
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
