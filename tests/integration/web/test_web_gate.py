"""The web inbox's rules without a browser: the permission table, operator tokens,
sign-in links, the local operator, the body bound and the picture types (real Redis,
the real app through Starlette's test client)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from bus.api import Bus
from bus.core.errors import BadInput, Refused, Unauthorized
from bus.core.settings import Settings
from bus.surfaces.http.gateway import create_app
from bus.surfaces.web.page_gate import MAX_FORM_BYTES, _origin, is_loopback
from bus.surfaces.web.permission import decide
from bus.trust import tokens
from tests.support.pictures import JPEG, png_bytes

SECRET = "gate-test-secret"

# (viewer kind, need, active member, own workspace) -> refusal code or None
CASES = [
    (None, "items", False, False, "signed_out"),
    (None, "operate", False, False, "signed_out"),
    ("operator", "operate", False, False, None),
    ("operator", "item_read", False, False, None),
    ("operator", "item_write", False, False, "members_only"),
    ("operator", "items", False, False, "members_only"),
    ("member", "operate", True, True, "operators_only"),
    ("member", "items", True, False, None),
    ("member", "items", False, False, "not_a_member"),
    ("member", "item_read", True, True, None),
    ("member", "item_write", True, True, None),
    ("member", "item_read", True, False, "not_your_workspace"),
    ("member", "item_write", True, False, "not_your_workspace"),
    ("member", "item_write", False, True, "not_a_member"),
]


@pytest.mark.parametrize(("kind", "need", "active", "own", "code"), CASES)
def test_the_permission_table(kind, need, active, own, code) -> None:  # type: ignore[no-untyped-def]
    assert decide(kind, need, member_active=active, own_workspace=own) == code


def test_an_unknown_need_is_a_bug_not_a_refusal() -> None:
    with pytest.raises(BadInput):
        decide("operator", "everything")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("::1", True),
        ("127.0.0.2", True),
        ("10.0.0.1", False),
        ("testclient", False),
        (None, False),
    ],
)
def test_loopback(host: str | None, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_origins_compare_scheme_and_host() -> None:
    assert _origin("http://127.0.0.1:5252/ui/items") == "http://127.0.0.1:5252"
    assert _origin("HTTPS://Inbox.Example") == "https://inbox.example"


def test_operator_tokens_carry_only_the_operator_scope_and_open_no_api() -> None:
    token = tokens.issue(SECRET, operator="root", scopes=[tokens.SCOPE_OPERATOR])
    claims = tokens.verify(SECRET, token)
    assert claims.actor == "operator:root" and claims.scopes == {tokens.SCOPE_OPERATOR}
    with pytest.raises(Unauthorized):
        tokens.require(claims, tokens.SCOPE_WRITE)
    for kw in (
        {"operator": "root", "scopes": [tokens.SCOPE_OPERATOR, tokens.SCOPE_WRITE]},
        {"operator": "root", "scopes": [tokens.SCOPE_READ]},
        {"member": "acme/luke", "scopes": [tokens.SCOPE_OPERATOR]},
        {"operator": "has space", "scopes": [tokens.SCOPE_OPERATOR]},
        {"operator": "root", "member": "acme/luke", "scopes": [tokens.SCOPE_OPERATOR]},
    ):
        with pytest.raises(BadInput):
            tokens.issue(SECRET, **kw)  # type: ignore[arg-type]


@pytest.fixture
def secured(make_bus: Callable[..., Bus]) -> Bus:
    b = make_bus(secret=SECRET, ui_url="https://inbox.example/")
    b.member_add("acme", "luke")
    b.member_add("acme", "dean")
    return b


def test_a_member_link_is_for_an_active_member_and_expires(secured: Bus) -> None:
    link = secured.member_link("acme/luke")
    assert link["url"] == f"https://inbox.example/ui/login?token={link['token']}"
    claims = tokens.verify(SECRET, link["token"])
    assert claims.actor == "member:acme/luke" and claims.exp is not None
    assert secured.member_link("acme/luke", ttl_s=60)["exp"] <= claims.iat + 60 + 5
    with pytest.raises(Refused):
        secured.member_link("acme/nobody")
    secured.member_remove("acme", "dean")
    with pytest.raises(Refused):
        secured.member_link("acme/dean")
    for bad in ("acme", "a/b/c", "acme/has space"):
        with pytest.raises(BadInput):
            secured.member_link(bad)


def test_a_member_link_needs_the_secret(bus: Bus) -> None:
    bus.member_add("acme", "luke")
    with pytest.raises(BadInput):
        bus.member_link("acme/luke")


@pytest.fixture
def item_with_picture(secured: Bus, tmp_path: Path) -> Bus:
    """Session agent (acme) with item deploy:prod carrying "shot.png", whose bytes are a JPEG."""
    token = secured.issue_token(session="agent", scopes=[tokens.SCOPE_WRITE])["token"]
    luke = tokens.issue(SECRET, member="acme/luke", scopes=[tokens.SCOPE_READ])
    secured.open_session("agent", workspace="acme", starter="luke", token=luke)
    secured.item_post("agent", "deploy:prod", title="Deploy?", token=token)
    (tmp_path / "shot.png").write_bytes(JPEG)
    (tmp_path / "real.png").write_bytes(png_bytes())
    secured.reply_inbox(
        "agent", "deploy:prod", image_paths=["shot.png", "real.png"], root=tmp_path, token=token
    )
    return secured


@pytest.fixture
def luke(item_with_picture: Bus) -> Iterator[TestClient]:
    client = TestClient(
        create_app(item_with_picture), base_url="http://127.0.0.1", follow_redirects=False
    )
    link = item_with_picture.member_link("acme/luke")
    # Opened by the visitor (a browser says Sec-Fetch-Site: none): signed in at once.
    answer = client.get(f"/ui/login?token={link['token']}", headers={"sec-fetch-site": "none"})
    assert answer.status_code == 200 and 'http-equiv="refresh" content="0;url=/ui/"' in answer.text
    assert (
        "HttpOnly" in answer.headers["set-cookie"]
        and "SameSite=strict" in answer.headers["set-cookie"]
    )
    assert answer.headers["referrer-policy"] == "no-referrer"
    yield client
    client.close()


def test_pictures_are_served_with_the_type_their_bytes_have(luke: TestClient) -> None:
    jpeg = luke.get("/ui/items/agent/deploy:prod/files/shot.png")
    assert jpeg.status_code == 200 and jpeg.headers["content-type"] == "image/jpeg"
    assert jpeg.headers["x-content-type-options"] == "nosniff"
    assert jpeg.headers["cache-control"] == "no-store"
    png = luke.get("/ui/items/agent/deploy:prod/files/real.png")
    assert png.headers["content-type"] == "image/png" and png.content == png_bytes()
    for bad in ("..%2F..%2Fsecret", ".hidden", "nope.png"):
        assert luke.get(f"/ui/items/agent/deploy:prod/files/{bad}").status_code in (400, 404)


def test_signed_out_visitors_get_no_page_and_no_picture(item_with_picture: Bus) -> None:
    with TestClient(
        create_app(item_with_picture), base_url="http://127.0.0.1", follow_redirects=False
    ) as anon:
        assert anon.get("/ui/items/agent/deploy:prod/files/real.png").status_code == 401
        assert anon.get("/ui/items/agent/deploy:prod").status_code == 401
        assert anon.get("/ui/sessions").status_code == 401
        bad = anon.get("/ui/login?token=inb1.bogus.token")
        assert bad.status_code == 401 and "set-cookie" not in bad.headers


def _csrf(client: TestClient) -> str:
    page = client.get("/ui/items/agent/deploy:prod").text
    return page.split('name="csrf" value="', 1)[1].split('"', 1)[0]


def test_a_form_over_the_bound_is_refused_before_it_is_read_whole(
    luke: TestClient, item_with_picture: Bus
) -> None:
    csrf = _csrf(luke)
    url = "/ui/items/agent/deploy:prod/write"
    headers = {"Origin": "http://127.0.0.1"}
    before = item_with_picture.item_detail("agent", "deploy:prod")

    def chunks() -> Iterator[bytes]:
        # No Content-Length (chunked): the bound is counted as the bytes arrive.
        for _ in range(MAX_FORM_BYTES // (1 << 20) + 2):
            yield b"x" * (1 << 20)

    streamed = luke.post(
        url,
        content=chunks(),
        headers={**headers, "Content-Type": "multipart/form-data; boundary=b"},
    )
    # The gateway's guard counts the bytes first (its JSON refusal, "too_large"); the
    # page's own bound ("body_too_large") answers behind it. Either way: 413, nothing written.
    assert streamed.status_code == 413 and "too_large" in streamed.text
    declared = luke.post(
        url,
        content=b"",
        headers={**headers, "Content-Length": str(MAX_FORM_BYTES + 1)},
    )
    assert declared.status_code == 413
    ok = luke.post(url, data={"csrf": csrf, "text": "fits"}, headers=headers)
    assert ok.status_code == 303
    after = item_with_picture.item_detail("agent", "deploy:prod")
    assert len(after["item"]["thread"]) == len(before["item"]["thread"]) + 1


def test_a_not_a_picture_upload_is_refused_and_writes_nothing(
    luke: TestClient, item_with_picture: Bus
) -> None:
    before = item_with_picture.item_detail("agent", "deploy:prod")
    answer = luke.post(
        "/ui/items/agent/deploy:prod/write",
        data={"csrf": _csrf(luke), "text": "see attached"},
        files={"pictures": ("evil.png", b"<script>alert(1)</script>", "image/png")},
        headers={"Origin": "http://127.0.0.1"},
    )
    assert answer.status_code == 400 and 'data-code="not_a_picture"' in answer.text
    assert item_with_picture.item_detail("agent", "deploy:prod") == before


def test_without_a_secret_loopback_visitors_are_the_local_operator(bus: Bus) -> None:
    app = create_app(bus)
    with TestClient(app, base_url="http://127.0.0.1", client=("127.0.0.1", 40000)) as local:
        page = local.get("/ui/sessions")
        assert page.status_code == 200 and "local (operator)" in page.text
        csp = page.headers["content-security-policy"]
        nonce = csp.split("'nonce-", 1)[1].split("'", 1)[0]
        assert f'<script nonce="{nonce}"' in page.text
        assert page.headers["x-frame-options"] == "DENY"
    with TestClient(app, base_url="http://127.0.0.1", client=("10.1.2.3", 40000)) as remote:
        assert remote.get("/ui/sessions").status_code == 401


def test_ui_without_the_slash_and_unknown_pages(bus: Bus) -> None:
    with TestClient(
        create_app(bus),
        base_url="http://127.0.0.1",
        client=("127.0.0.1", 40000),
        follow_redirects=False,
    ) as c:
        assert c.get("/ui").status_code in (307, 308)
        assert c.get("/ui/").headers["location"] == "/ui/sessions"  # the local operator
        assert c.get("/ui/nope").status_code == 404
        assert c.get("/ui/static/style.css").headers["content-type"].startswith("text/css")


def test_the_cli_refuses_a_link_for_a_non_member_and_a_token_without_scopes(
    settings: Settings,
) -> None:
    import json
    import subprocess
    import sys
    from dataclasses import replace

    from bus.core.settings import SOURCE_ROOT

    env = replace(settings, secret=SECRET).child_env()

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "bus.surfaces.cli.app", *args],
            env=env,
            cwd=str(SOURCE_ROOT),
            capture_output=True,
            text=True,
            timeout=60,
        )

    link = run("member", "link", "acme/nobody")
    assert link.returncode != 0 and len(link.stderr.strip().splitlines()) == 1
    assert json.loads(link.stdout)["error"] == "not_a_member"
    bare = run("token", "issue")
    assert bare.returncode == 2 and "--scopes" in bare.stderr
    op = run("token", "issue", "--operator", "root")
    assert op.returncode == 0
    assert json.loads(op.stdout)["scopes"] == [tokens.SCOPE_OPERATOR]


@pytest.mark.parametrize(
    ("rows", "order"),
    [
        ([], []),
        (
            [
                {"key": "a", "status": "settled", "updatedAt": 9},
                {"key": "b", "status": "open", "updatedAt": 1},
                {"key": "c", "status": "open", "updatedAt": 5},
            ],
            ["c", "b", "a"],
        ),
        (
            [
                {"key": "y", "status": "open", "updatedAt": 3},
                {"key": "x", "status": "open", "updatedAt": 3},
            ],
            ["x", "y"],
        ),
    ],
)
def test_items_list_open_first_then_newest(rows: list[dict], order: list[str]) -> None:
    from bus.services.items import order_items

    assert [r["key"] for r in order_items(rows)] == order


def test_a_workspaces_items_and_an_items_thread_as_members_read_them(
    bus: Bus, tmp_path: Path
) -> None:
    for ws, name in (("acme", "dean"), ("acme", "luke"), ("globex", "eve")):
        bus.member_add(ws, name)
    bus.open_session("one", workspace="acme", starter="dean")
    bus.open_session("two", workspace="acme", starter="dean")
    bus.open_session("three", workspace="globex", starter="eve")
    bus.item_post("one", "old", title="Old")
    bus.item_post("two", "new", title="New")
    bus.item_post("three", "theirs", title="Theirs")
    bus.item_write("one", "old", member="luke", text="looked")
    bus.item_settle("two", "new", member="dean", answer="fine")
    listed = bus.workspace_items("acme")["items"]
    assert [(i["session"], i["key"], i["status"], i["lastBy"]) for i in listed] == [
        ("one", "old", "open", "luke"),
        ("two", "new", "settled", "agent"),
    ]
    bus.member_remove("acme", "luke")
    assert bus.workspace_items("acme")["items"][0]["lastBy"] == "a former member"
    detail = bus.item_detail("one", "old")["item"]
    assert [e["from"] for e in detail["thread"]] == ["a former member"]
    assert detail["handle"] == "hosta:one" and detail["title"] == "Old"
    with pytest.raises(BadInput):
        bus.workspace_items("../acme")


def _sse(text: str) -> list[dict[str, str]]:
    events = []
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            name, _, value = line.partition(": ")
            fields[name] = value
        if "event" in fields:
            events.append(fields)
    return events


def test_the_live_stream_ends_in_time_and_resumes_after_its_last_event_id(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    import httpx

    from bus.surfaces.web import live as web_live
    from tests.support.web_support import Served, free_port

    monkeypatch.setattr(web_live, "STREAM_LIFETIME_S", 1.0)
    monkeypatch.setattr(web_live, "ROWS_EVERY_S", 0.2)
    bus.open_session("s1")
    first = bus.send({"from": "h:a", "to_id": "s1", "text": "before"})
    bus.send({"from": "h:a", "to_id": "s1", "text": "after"})
    [(first_sid, _)] = bus.store.r.xrange(bus.store.k.s("s1", "stream"), count=1)
    assert first["ok"]
    served = Served(bus, free_port())
    try:
        url = f"{served.base}/ui/sessions/events"
        # The stream ends by itself (bounded), so reading it whole terminates.
        resumed = httpx.get(url, headers={"Last-Event-ID": first_sid}, timeout=10)
        fresh = httpx.get(url, timeout=10)
    finally:
        served.stop()
    events = _sse(resumed.text)
    texts = [json.loads(e["data"])["text"] for e in events if e["event"] == "message"]
    assert texts == ["after"]  # resumed after "before", and only once
    last_id = [e["id"] for e in events if "id" in e][-1]
    assert last_id != first_sid and last_id.split("-")[0].isdigit()
    assert not [e for e in _sse(fresh.text) if e["event"] == "message"]  # starts at "now"
    assert resumed.headers["content-type"].startswith("text/event-stream")
