"""Attacks on the HTTP gateway's front door (docs/security.md, "The gateway's front
door" and the policy decisions it keeps): borrowed tokens, cross-site and rebinding
requests, bounds on bodies, connections and time, sign-in tokens and the access log, what
``/health`` shows. Each attack is refused and nothing is written.

Real Redis, a real uvicorn gateway on a loopback port (or in-process where the test says).
"""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from bus.api import Bus
from bus.core.errors import BadInput
from bus.core.models import now_ms
from bus.surfaces.http.front_door import MAX_IN_FLIGHT_PER_CLIENT, HeaderDeadlineH11
from bus.surfaces.http.gateway import check_bind, create_app, log_config, serve_options
from tests.support.gateway_server import Server, app_client, bearer
from tests.support.trust import DEAN, SECRET, tok


def stream_len(b: Bus, sid: str) -> int:
    return int(b.store.r.xlen(b.store.k.s(sid, "stream")))


def _client_from(address: str, url: str) -> httpx.Client:
    return httpx.Client(
        base_url=url, timeout=10, transport=httpx.HTTPTransport(local_address=address)
    )


def test_the_gateway_never_lends_its_own_token(
    make_bus: Callable[..., Bus], serve: Callable[..., Server]
) -> None:
    setup = make_bus(secret=SECRET)
    setup.open_session("alice", handle="ha:alice")
    setup.open_session("bob", handle="ha:bob")
    b = make_bus(secret=SECRET, token=tok(session="alice"))  # the gateway's environment
    gw = serve(b).client
    for headers in ({}, {"authorization": "Bearer"}, {"authorization": "Basic Zm9vOmJhcg=="}):
        r = gw.post("/v1/send", json={"to_id": "bob", "text": "hi"}, headers=headers)
        assert r.status_code == 401 and r.json()["error"] == "token_missing"
        r = gw.post("/send", json={"to_id": "bob", "text": "hi", "from": "x:y"}, headers=headers)
        assert r.status_code == 401
    assert stream_len(b, "bob") == 0
    assert not b.floor.peek("bob")  # nothing on its floor
    assert b.settings.token  # the caller's bus keeps its own token


def test_cross_site_and_rebinding_requests_are_refused(
    bus: Bus, serve: Callable[..., Server]
) -> None:
    bus.open_session("s1")
    gw = serve(bus).client
    body = json.dumps({"from": "h:x", "to_id": "s1", "text": "blocker!"})
    for path in ("/send", "/v1/send"):
        r = gw.post(path, content=body, headers={"content-type": "text/plain"})
        assert r.status_code == 415 and r.json()["error"] == "unsupported_media_type"
        r = gw.post(
            path,
            content=body,
            headers={"content-type": "application/json", "origin": "http://evil.example"},
        )
        assert r.status_code == 403 and r.json()["error"] == "cross_origin"
        r = gw.post(
            path,
            content=body,
            headers={"content-type": "text/plain", "origin": "http://evil.example"},
        )
        assert r.status_code in (403, 415)
        # DNS rebinding: the page's own name in Host.
        r = gw.post(
            path, content=body, headers={"content-type": "application/json", "host": "evil.example"}
        )
        assert r.status_code == 421 and r.json()["error"] == "host_refused"
    assert stream_len(bus, "s1") == 0
    assert not bus.floor.peek("s1")  # nothing on its floor
    # The same request from a same-origin page or a plain client goes through.
    same = gw.post(
        "/v1/send",
        content=body,
        headers={"content-type": "application/json", "origin": gw.base_url.__str__().rstrip("/")},
    )
    assert same.status_code == 200, same.text


def test_a_configured_host_list_replaces_the_loopback_names(
    make_bus: Callable[..., Bus], serve: Callable[..., Server]
) -> None:
    b = make_bus(allowed_hosts=("bus.internal",))
    gw = serve(b).client
    assert gw.get("/health").status_code == 421
    assert gw.get("/health", headers={"host": "bus.internal:5252"}).status_code == 200


def test_gateway_bounds(bus: Bus, serve: Callable[..., Server]) -> None:
    bus.open_session("s1")
    srv = serve(bus, read_timeout_s=0.5)
    gw = srv.client
    big = json.dumps({"from": "h:x", "to_id": "s1", "text": "x" * 200_000})
    r = gw.post("/v1/send", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error"] == "too_large"

    def chunks() -> Iterator[bytes]:  # no Content-Length: the cap counts what arrives
        for _ in range(100):
            yield b"x" * 1024

    r = gw.post("/send", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413
    nested = "[" * 100_000 + "]" * 100_000
    for path in ("/send", "/v1/send"):
        r = gw.post(path, content=nested, headers={"content-type": "application/json"})
        assert r.status_code in (400, 413)
        r = gw.post(
            path,
            content='{"a":' * 5000 + "1" + "}" * 5000,
            headers={"content-type": "application/json"},
        )
        assert r.status_code == 400
    r = gw.post("/v1/send", json={"from": "h:x", "to": "h:{x}", "text": "hi"})
    assert r.status_code == 400 and r.json()["error"] == "bad_input"
    # A stalled body is timed out.
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as raw:
        raw.sendall(
            b"POST /v1/send HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
        )
        answer = raw.recv(4096)
    assert answer.startswith(b"HTTP/1.1 408")
    assert stream_len(bus, "s1") == 0
    # A non-loopback bind without a secret is refused; loopback or a secret is fine.
    with pytest.raises(BadInput) as err:
        check_bind(bus, "0.0.0.0")
    assert err.value.code == "insecure_bind"
    check_bind(bus, "127.0.0.1")


def test_inbox_serve_refuses_a_public_bind_without_a_secret(bus: Bus) -> None:
    env = bus.settings.child_env()
    env.pop("INBOX_SECRET", None)
    out = subprocess.run(
        [sys.executable, "-m", "bus.surfaces.cli.app", "serve", "--host", "0.0.0.0", "--port", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and "INBOX_SECRET" in out.stderr
    assert json.loads(out.stdout)["error"] == "insecure_bind"


def test_serve_runs_uvicorn_with_timeouts_and_a_concurrency_limit(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    import bus.surfaces.http.gateway as http

    got: dict[str, Any] = {}
    monkeypatch.setattr(http.uvicorn, "run", lambda app, **kw: got.update(kw))
    http.serve(bus, host="127.0.0.1", port=1)
    assert got["timeout_keep_alive"] == http.KEEPALIVE_TIMEOUT_S
    assert got["limit_concurrency"] == http.MAX_CONCURRENCY
    with pytest.raises(BadInput):
        http.serve(bus, host="0.0.0.0", port=1)


def test_stalled_headers_are_timed_out(bus: Bus, monkeypatch: pytest.MonkeyPatch) -> None:
    import bus.surfaces.http.front_door as guard

    monkeypatch.setattr(guard, "HEADER_TIMEOUT_S", 0.3)
    srv = Server(create_app(bus), http=guard.HeaderDeadlineH11)
    try:
        for first in (b"", b"POST /v1/send HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "):
            with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as raw:
                raw.sendall(first)
                assert raw.recv(4096) == b""  # closed by the server, not by our timeout
        # Whole requests on one kept-alive connection still work.
        with httpx.Client(base_url=srv.url, timeout=10) as c:
            assert [c.get("/health").status_code for _ in range(3)] == [200] * 3
    finally:
        srv.stop()


def test_a_body_without_a_valid_token_is_never_read(two: Bus, serve: Callable[..., Server]) -> None:
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


def test_idle_connections_starve_no_one(bus: Bus) -> None:
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


def test_one_address_holds_a_bounded_share_of_the_requests(bus: Bus) -> None:
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


def test_sign_in_tokens_never_reach_the_access_log(two: Bus) -> None:
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


def test_a_cross_site_page_cannot_sign_a_visitor_in(two: Bus) -> None:
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


def test_the_stored_time_is_the_servers(two: Bus, serve: Callable[..., Server]) -> None:
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


def test_health_without_a_token_shows_no_host_home_or_pid(two: Bus) -> None:
    two.store.schedule.beat("hosta", {"pid": 4242, "started": now_ms(), "beat": now_ms()})
    gw = app_client(two)
    bare = gw.get("/health")
    assert bare.status_code == 200 and bare.json() == {"ok": True, "redis": True}
    assert str(two.settings.home) not in bare.text and "4242" not in bare.text
    forged = gw.get("/health", headers=bearer("inb1.x.y")).json()
    assert "host" not in forged and "workers" not in forged
    shown = gw.get("/health", headers=bearer(DEAN)).json()
    assert shown["host"] == two.settings.host and "workers" in shown
