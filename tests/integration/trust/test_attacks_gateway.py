"""Issue 9's gateway findings (4, 5, 6), one test each: the attack is refused and nothing
is written. A real uvicorn gateway on a loopback port, real Redis.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from bus.api import Bus
from bus.core.errors import BadInput
from bus.surfaces.http.gateway import check_bind, create_app
from tests.support.gateway_server import Server
from tests.support.trust import SECRET, tok


def stream_len(b: Bus, sid: str) -> int:
    return int(b.store.r.xlen(b.store.k.s(sid, "stream")))


# 4 ------------------------------------------------------------------------------------------


def test_4_the_gateway_never_lends_its_own_token(
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


# 5 ------------------------------------------------------------------------------------------


def test_5_cross_site_and_rebinding_requests_are_refused(
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


def test_5_a_configured_host_list_replaces_the_loopback_names(
    make_bus: Callable[..., Bus], serve: Callable[..., Server]
) -> None:
    b = make_bus(allowed_hosts=("bus.internal",))
    gw = serve(b).client
    assert gw.get("/health").status_code == 421
    assert gw.get("/health", headers={"host": "bus.internal:5252"}).status_code == 200


# 6 ------------------------------------------------------------------------------------------


def test_6_gateway_bounds(bus: Bus, serve: Callable[..., Server]) -> None:
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


def test_6_inbox_serve_refuses_a_public_bind_without_a_secret(bus: Bus) -> None:
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


def test_6_serve_runs_uvicorn_with_timeouts_and_a_concurrency_limit(
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


def test_6_stalled_headers_are_timed_out(bus: Bus, monkeypatch: pytest.MonkeyPatch) -> None:
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
