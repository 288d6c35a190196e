"""docs/security.md's policy decisions, one test each (numbered as listed there): the attack
is refused on every surface it reached and nothing is written.

Real Redis, real files, a real uvicorn gateway on a loopback port, the CLI as a child.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from bus.api import Bus
from bus.core.errors import BadInput, RateLimited, Refused, Unauthorized
from bus.surfaces.http.front_door import MAX_IN_FLIGHT_PER_CLIENT, HeaderDeadlineH11
from bus.surfaces.http.gateway import create_app, log_config, serve_options
from bus.trust.tokens import SCOPE_OPERATOR, issue
from tests.support.cli import inbox_as
from tests.support.gateway_server import Server
from tests.support.pictures import png
from tests.support.trust import ALL, DEAN, ERIN, SECRET, stored, tok

# 1 ------------------------------------------------------------------------------------------


def test_1_a_member_sends_only_into_its_own_workspace(
    two: Bus, serve: Callable[..., Server]
) -> None:
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


# 2 ------------------------------------------------------------------------------------------


def test_2_a_body_without_a_valid_token_is_never_read(
    two: Bus, serve: Callable[..., Server]
) -> None:
    srv = serve(two, read_timeout_s=5.0)
    for auth in (b"", b"Authorization: Bearer inb1.forged.token\r\n"):
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as raw:
            raw.sendall(
                b"POST /v1/send/batch HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Type: application/json\r\nContent-Length: 30000000\r\n" + auth + b"\r\n["
            )
            started = time.monotonic()
            answer = b""
            while chunk := raw.recv(65536):  # the server closes the connection after it
                answer += chunk
        # Answered at once, not after waiting for 30 MB (or the read timeout, 408).
        assert answer.startswith(b"HTTP/1.1 401"), answer[:80]
        assert time.monotonic() - started < 4
        code = json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]
        assert code == ("token_missing" if not auth else "token_bad_signature")


# 3 ------------------------------------------------------------------------------------------


def _client_from(address: str, url: str) -> httpx.Client:
    return httpx.Client(
        base_url=url, timeout=10, transport=httpx.HTTPTransport(local_address=address)
    )


def test_3_idle_connections_starve_no_one(bus: Bus) -> None:
    bus.open_session("s1")
    opts = serve_options(bus)
    srv = Server(
        create_app(bus), http=HeaderDeadlineH11, limit_concurrency=opts["limit_concurrency"]
    )
    idle = [socket.create_connection(("127.0.0.1", srv.port), timeout=10) for _ in range(100)]
    try:
        with httpx.Client(base_url=srv.url, timeout=10) as c:
            assert c.get("/health").status_code == 200
            r = c.post("/v1/send", json={"from": "h:x", "to_id": "s1", "text": "hi"})
            assert r.status_code == 200, r.text
    finally:
        for s in idle:
            s.close()
        srv.stop()


def test_3_one_address_holds_a_bounded_share_of_the_requests(bus: Bus) -> None:
    srv = Server(create_app(bus, read_timeout_s=8.0), http=HeaderDeadlineH11)
    stalled = []
    try:
        for _ in range(MAX_IN_FLIGHT_PER_CLIENT):  # bodies that never arrive: in flight
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
            s.sendall(
                b"POST /v1/send HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
            )
            stalled.append(s)
        with httpx.Client(base_url=srv.url, timeout=10) as c:
            deadline = time.monotonic() + 5
            while (r := c.post("/v1/send", json={})).status_code != 503:
                assert time.monotonic() < deadline, "the address was never bounded"
            assert r.json()["error"] == "busy"
            assert c.get("/health").status_code == 200  # always answered
        with _client_from("127.0.0.2", srv.url) as other:
            assert other.post("/v1/send", json={}).status_code == 400  # served: bad input
    finally:
        for s in stalled:
            s.close()
        srv.stop()


# 5 ------------------------------------------------------------------------------------------


def test_5_another_senders_id_is_refused_not_squatted(
    two: Bus, serve: Callable[..., Server]
) -> None:
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


# 6 ------------------------------------------------------------------------------------------


def test_6_a_sessions_workspace_is_fixed_once_set(two: Bus, serve: Callable[..., Server]) -> None:
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


def test_6_joining_a_workspace_takes_its_starters_or_an_operators_token(two: Bus) -> None:
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
    # Without a secret nothing changes: anyone may join (marked unverified elsewhere).


# 7 ------------------------------------------------------------------------------------------


def test_7_sign_in_tokens_never_reach_the_access_log(two: Bus) -> None:
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    token = two.member_link("acme/dean")["token"]
    srv = Server(create_app(two), log_config=log_config())
    keep = Keep()
    access = logging.getLogger("uvicorn.access")
    access.setLevel(logging.INFO)  # the test server logs warnings only
    access.addHandler(keep)
    try:
        srv.client.get(f"/ui/login?token={token}")
        srv.client.get("/health?token=inb1.other.secret")
    finally:
        logging.getLogger("uvicorn.access").removeHandler(keep)
        srv.stop()
    joined = "\n".join(lines)
    assert "/ui/login?token=***" in joined and "/health?token=***" in joined
    assert token not in joined and "inb1" not in joined


# 8 ------------------------------------------------------------------------------------------


def test_8_member_and_operator_names_are_reserved(two: Bus) -> None:
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


# 10 -----------------------------------------------------------------------------------------


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
def test_10_look_alike_handles_are_refused(two: Bus, handle: str) -> None:
    with pytest.raises(BadInput) as err:
        two.open_session("mallory", handle=handle)
    assert err.value.code == "handle_confusable"
    out = inbox_as(two.settings, "session", "open", "mallory", "--handle", handle)
    assert out.returncode != 0 and json.loads(out.stdout)["error"] == "handle_confusable"
    assert two.store.sessions.get_session("mallory") is None


# 11 -----------------------------------------------------------------------------------------


def test_11_a_cross_site_page_cannot_sign_a_visitor_in(two: Bus) -> None:
    attacker = two.member_link("beta/erin")["token"]
    client = TestClient(create_app(two), base_url="http://127.0.0.1", follow_redirects=False)
    # A cross-site navigation (or a browser that does not say) gets a confirmation page.
    for headers in ({"sec-fetch-site": "cross-site"}, {}):
        page = client.get(f"/ui/login?token={attacker}", headers=headers)
        assert page.status_code == 200 and "inbox_ui=" not in page.headers.get("set-cookie", "")
        assert "Sign in as beta/erin?" in page.text
    csrf = page.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    form = {"token": attacker, "csrf": csrf}
    # A cross-site post of the form, or one without the pre-sign-in cookie, is refused.
    r = client.post("/ui/login", data=form, headers={"origin": "http://evil.example"})
    assert r.status_code == 403 and "inbox_ui=" not in r.headers.get("set-cookie", "")
    fresh = TestClient(create_app(two), base_url="http://127.0.0.1", follow_redirects=False)
    r = fresh.post("/ui/login", data=form, headers={"origin": "http://127.0.0.1"})
    assert r.status_code == 403 and "inbox_ui=" not in r.headers.get("set-cookie", "")
    # The visitor's own click on the same-origin form signs in.
    r = client.post("/ui/login", data=form, headers={"origin": "http://127.0.0.1"})
    assert r.status_code == 200 and "inbox_ui=" in r.headers["set-cookie"]
    # A link the visitor opened themselves signs in at once.
    direct = client.get(f"/ui/login?token={attacker}", headers={"sec-fetch-site": "none"})
    assert "inbox_ui=" in direct.headers["set-cookie"]


# 12 -----------------------------------------------------------------------------------------


def test_12_items_and_requests_spend_from_the_senders_bucket(
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


def test_12_pictures_have_a_per_session_quota(make_bus: Callable[..., Bus], tmp_path: Path) -> None:
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


def test_12_send_and_v1_send_share_one_bucket(
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


# 13 -----------------------------------------------------------------------------------------


def test_13_prox_door_keeps_the_unread_cap_and_makes_no_folders(
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


# 14 -----------------------------------------------------------------------------------------


def test_14_the_takers_setting_cannot_make_a_live_holder_stale(two: Bus) -> None:
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


# 15 -----------------------------------------------------------------------------------------


def test_15_the_stored_time_is_the_servers(two: Bus, serve: Callable[..., Server]) -> None:
    alice = tok(session="bob")
    gw = serve(two).client
    auth = {"authorization": f"Bearer {alice}"}
    before = int(time.time() * 1000)
    ids = [two.send({"to_id": "loner", "text": "a", "ts": 1}, token=alice)["id"]]
    r = gw.post(
        "/v1/send", json={"to_id": "loner", "text": "b", "ts": 99999999999999}, headers=auth
    )
    ids.append(r.json()["id"])
    r = gw.post("/send", json={"to_id": "loner", "text": "c", "ts": 1}, headers=auth)
    assert r.status_code == 200
    after = int(time.time() * 1000)
    two.deliver_session("loner")
    seen = {m["id"]: m["ts"] for m in two.floor.peek("loner")}
    entries = two.store.r.xrange(two.store.k.s("loner", "stream"))
    seen.update({json.loads(f["m"])["id"]: json.loads(f["m"])["ts"] for _i, f in entries})
    for msg in two.store.r.hvals(two.store.k.s("loner", "msgs")):
        m = json.loads(msg)
        seen.setdefault(m["id"], m.get("ts"))
    assert len(seen) >= 3
    assert all(before <= ts <= after for ts in seen.values() if ts is not None), seen


# also ---------------------------------------------------------------------------------------


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


def test_stopping_inbox_flower_stops_its_child(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "import bus.ops.flower as f\n"
        "from pathlib import Path\nfrom bus.core.settings import Settings\n"
        "f.flower_argv = lambda *a: [sys.executable, '-c', "
        "'import os, time; print(os.getpid(), flush=True); time.sleep(120)']\n"
        f"sys.exit(f.run_flower(Settings(home=Path({str(tmp_path)!r}), broker_url='redis://127.0.0.1:1/0'), basic_auth='u:p'))\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=dict(os.environ)
    )
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        parent.send_signal(signal.SIGTERM)
        parent.wait(30)
        deadline = time.monotonic() + 10
        while Path(f"/proc/{child}").exists():
            state = Path(f"/proc/{child}/stat").read_text().split()[2]
            if state == "Z":
                break
            assert time.monotonic() < deadline, "flower's child outlived inbox flower"
            time.sleep(0.05)
    finally:
        if parent.poll() is None:
            parent.kill()
