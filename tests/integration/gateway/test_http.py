"""The HTTP gateway against a real uvicorn server on a free loopback port."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bus.api import Bus
from bus.surfaces.harness.listener import Listener
from bus.surfaces.http.gateway import serve
from bus.telemetry.metrics import Metrics
from tests.support.gateway_server import Server, wire


@pytest.fixture
def gw(bus: Bus, gateway: Callable[[Bus], Server]) -> httpx.Client:
    bus.open_session("s1")  # prox's door delivers to sessions this host knows
    return gateway(bus).client


def floor_lines(b: Bus, sid: str) -> list[dict[str, Any]]:
    path = Path(b.settings.home) / "inbox" / sid / "messages.jsonl"
    return [json.loads(ln) for ln in path.read_text().splitlines()]


def test_send_lands_on_the_file_floor(bus: Bus, gw: httpx.Client) -> None:
    r = gw.post("/send", json=wire(pr=7, urgency="urgent"))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["ok"] is True and body["via"] == "file"
    [line] = floor_lines(bus, "s1")
    # The whole wire message is kept, not only from/text/urgency.
    assert line["id"] == body["id"] and line["pr"] == 7 and line["urgency"] == "urgent"
    assert line["from"] == "neo:sip" and line["v"] == 1 and "ts" in line


def test_send_without_content_type_is_accepted(bus: Bus, gw: httpx.Client) -> None:
    r = gw.post("/send", content=json.dumps(wire(id="m-1")).encode())
    assert r.json() == {"ok": True, "via": "file", "id": "m-1"}


def test_send_reaches_a_listening_socket(bus: Bus, gw: httpx.Client) -> None:
    got: list[dict[str, Any]] = []

    def on_line(obj: dict[str, Any]) -> bool:
        got.append(obj)
        return True

    with Listener.for_session(bus.floor, "s1", on_line):
        r = gw.post("/send", json=wire(text="now"))
    assert r.json()["via"] == "socket"
    assert [g["text"] for g in got] == ["now"]
    assert floor_lines(bus, "s1") == []  # nothing on the file


def test_send_to_an_unknown_session_is_404_unknown_session_and_makes_no_folder(
    bus: Bus, gw: httpx.Client
) -> None:
    r = gw.post("/send", json=wire(to_id="h-1"))
    assert r.status_code == 404
    answer = r.json()
    assert answer["ok"] is False and answer["error"] == "unknown_session"
    assert answer["message"].startswith("no session 'h-1' on this host;")
    assert not (Path(bus.settings.home) / "inbox" / "h-1").exists()


def test_send_reaches_a_listener_whose_socket_path_is_over_200_bytes(
    make_bus: Callable[..., Bus], gateway: Callable[[Bus], Server], home: Path
) -> None:
    b = make_bus(home=home / ("d" * 100) / ("e" * 60))
    sid = "0f5c2a9e-8d1b-4c3e-9a7f-6b2d1e0c4f8a"
    b.open_session(sid)
    assert len(str(b.floor.socket_path(sid)).encode()) > 200
    got: list[dict[str, Any]] = []
    with Listener.for_session(b.floor, sid, lambda o: got.append(o) or True):
        r = gateway(b).client.post("/send", json=wire(to_id=sid, text="deep"))
    assert r.json()["via"] == "socket" and [g["text"] for g in got] == ["deep"]
    assert floor_lines(b, sid) == []


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (wire(to_id="a/b"), "to_id"),
        (wire(to_id=".."), "to_id"),
        (wire(text="x" * 8001), "8000"),
        (wire(colour="red"), "unknown field 'colour'"),
        (wire(text="   "), "blank"),
        ("{not json", "not JSON"),
        ([1, 2], "JSON object"),
    ],
)
def test_send_refuses_bad_input_and_writes_nothing(
    bus: Bus, gw: httpx.Client, body: Any, needle: str
) -> None:
    raw = body if isinstance(body, str) else json.dumps(body)
    r = gw.post("/send", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 400
    answer = r.json()
    assert answer["ok"] is False and answer["error"] == "bad_input"
    assert needle in answer["message"] and "\n" not in answer["message"]
    inbox = Path(bus.settings.home) / "inbox"
    assert [p.name for p in inbox.iterdir()] == ["s1"] and not bus.floor.peek("s1")


def test_v1_send_stores_in_redis(bus: Bus, gw: httpx.Client) -> None:
    bus.open_session("s1")
    r = gw.post("/v1/send", json=wire(id="m-9"))
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["state"] == "stored" and answer["id"] == "m-9"
    assert answer["recipient"]["session"] == "s1"
    assert bus.store.queue.backlog("s1") == 1
    again = gw.post("/v1/send", json=wire(id="m-9")).json()
    assert again["duplicate"] is True and bus.store.queue.backlog("s1") == 1


def test_v1_send_bounces_unknown_and_maps_errors(bus: Bus, gw: httpx.Client) -> None:
    bounced = gw.post("/v1/send", json=wire(to_id="nobody")).json()
    assert bounced["state"] == "bounced" and bounced["ok"] is False
    r = gw.post("/v1/send", json=wire(to_id="a/b"))
    assert r.status_code == 400 and r.json()["error"] == "bad_input"
    r = gw.post("/v1/send", json={"from": "neo:sip", "to": "neo:ghost", "text": "hi"})
    assert r.status_code == 404 and r.json()["error"] == "not_found"
    bus.open_session("d1", handle="neo:twin")
    # d1's harness is long gone (stale), so d2 may take the handle; both still live.
    bus.store.r.hset(bus.store.k.s("d1", "session"), "last_seen", 1)
    bus.open_session("d2", handle="neo:twin")
    r = gw.post("/v1/send", json={"from": "neo:sip", "to": "neo:twin", "text": "hi"})
    assert r.status_code == 409 and len(r.json()["candidates"]) == 2


def test_health_and_local_send_with_redis_down(
    make_bus: Callable[..., Bus], gateway: Callable[[Bus], Server]
) -> None:
    dead = make_bus(redis_url="redis://127.0.0.1:1/0")
    client = gateway(dead).client
    dead.floor.prepare("s1")  # opened on this host: its floor folder is there
    r = client.get("/health")
    assert r.status_code == 200
    assert r.json() == {"ok": True, "redis": False, "host": "hosta"}
    assert client.post("/send", json=wire()).json()["via"] == "file"
    assert len(floor_lines(dead, "s1")) == 1
    r = client.post("/v1/send", json=wire())
    assert r.status_code == 503 and r.json()["ok"] is False
    assert "inbox_redis_up 0.0" in client.get("/metrics").text


def test_health_with_redis_up(gw: httpx.Client) -> None:
    body = gw.get("/health").json()
    assert body == {"ok": True, "redis": True, "host": "hosta", "workers": []}  # no heartbeats yet


def test_metrics_exposes_shared_counters_and_requests(bus: Bus, gw: httpx.Client) -> None:
    Metrics(bus.store).incr("messages_in")
    gw.post("/send", json=wire(to_id="a/b"))
    r = gw.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert "inbox_messages_in_total 1.0" in r.text
    assert 'inbox_http_requests_total{route="/send",status="400"} 1.0' in r.text


def test_openapi_documents_the_routes(gw: httpx.Client) -> None:
    doc = gw.get("/openapi.json").json()
    assert {"/send", "/v1/send", "/health", "/metrics"} <= set(doc["paths"])
    body = doc["paths"]["/send"]["post"]["requestBody"]["content"]["application/json"]
    assert body["schema"]["$ref"] == "#/components/schemas/Message"
    message = doc["components"]["schemas"]["Message"]
    assert {"from", "to_id", "text"} <= set(message["properties"])
    # Every reference in the document resolves.
    refs = set(_refs(doc))
    assert refs and all(r.split("/")[-1] in doc["components"]["schemas"] for r in refs)


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref":
                yield v
            else:
                yield from _refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _refs(v)


def test_serve_binds_loopback_by_default() -> None:
    params = inspect.signature(serve).parameters
    assert params["host"].default == "127.0.0.1"
    assert params["port"].default == 5252


def test_v1_send_takes_the_sender_from_a_bearer_token(
    make_bus: Callable[..., Bus], gateway: Callable[[Bus], Server]
) -> None:
    from bus.trust.tokens import SCOPE_WRITE, issue

    secret = "http-secret-0123456789"
    b = make_bus(secret=secret)
    b.open_session("alice", handle="neo:alice")
    b.open_session("bob")
    client = gateway(b).client
    body = {"to_id": "bob", "text": "hi"}
    assert client.post("/v1/send", json=body).status_code == 401  # no token: refused
    token = issue(secret, session="alice", scopes=[SCOPE_WRITE])
    auth = {"Authorization": f"Bearer {token}"}
    forged = client.post("/v1/send", json={**body, "from": "neo:bob"}, headers=auth)
    assert forged.status_code == 401 and forged.json()["error"] == "forged_from"
    ok = client.post("/v1/send", json=body, headers=auth)
    assert ok.status_code == 200 and ok.json()["state"] == "stored"
    [(_eid, fields)] = b.store.queue.read_after("bob", "0-0")
    assert json.loads(fields["m"])["from"] == "neo:alice"


def test_prox_send_needs_a_token_once_a_secret_is_configured(
    make_bus: Callable[..., Bus], gateway: Callable[[Bus], Server]
) -> None:
    from bus.trust.tokens import SCOPE_WRITE, issue

    secret = "http-secret-0123456789"
    b = make_bus(secret=secret)
    b.open_session("alice", handle="neo:alice")
    client = gateway(b).client
    refused = client.post("/send", json=wire())
    assert refused.status_code == 401 and refused.json()["ok"] is False
    assert not (Path(b.settings.home) / "inbox" / "s1").exists()
    b.open_session("s1")
    token = issue(secret, session="alice", scopes=[SCOPE_WRITE])
    ok = client.post(
        "/send", json=wire(**{"from": "neo:alice"}), headers={"Authorization": f"Bearer {token}"}
    )
    assert ok.status_code == 200 and ok.json()["via"] == "file"
    [line] = floor_lines(b, "s1")
    assert line["verified"] is True and line["from_session"] == "alice"


def test_prox_send_marks_senders_unverified_without_a_secret(bus: Bus, gw: httpx.Client) -> None:
    assert gw.post("/send", json=wire(verified=True)).status_code == 200
    [line] = floor_lines(bus, "s1")
    assert line["verified"] is False
