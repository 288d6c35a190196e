"""Authenticated senders on a real Redis store."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from bus.api import Bus
from bus.core.errors import Unauthorized
from bus.core.settings import Settings
from bus.trust.tokens import SCOPE_READ, SCOPE_THREAD, SCOPE_WRITE, issue

SECRET = "test-secret-1234567890"


@pytest.fixture
def secured(make_bus: Callable[..., Bus]) -> Bus:
    b = make_bus(secret=SECRET)
    b.open_session("alice", handle="hosta:alice")
    b.open_session("bob", handle="hosta:bob")
    return b


def tok(session: str, *scopes: str, **kw: Any) -> str:
    return issue(SECRET, session=session, scopes=scopes or (SCOPE_WRITE,), **kw)


def stored(b: Bus, sid: str) -> int:
    return int(b.store.r.xlen(b.store.k.s(sid, "stream")))


def test_the_sender_comes_from_the_token_and_is_verified(secured: Bus) -> None:
    answer = secured.send({"to_id": "bob", "text": "hi"}, token=tok("alice"))
    assert answer["state"] == "stored"
    secured.deliver_session("bob")
    # Delivered: the queue was emptied, the message is in bob's inbox record.
    [line] = [rec["m"] for rec in secured.store.inbox.all_records("bob")]
    assert line["from"] == "hosta:alice" and line["from_session"] == "alice"
    assert line["verified"] is True


@pytest.mark.parametrize(
    ("body", "token_of", "code"),
    [
        ({"from": "hosta:bob"}, lambda: tok("alice"), "forged_from"),
        ({"from_session": "bob"}, lambda: tok("alice"), "forged_from"),
        ({}, lambda: None, "token_missing"),
        ({}, lambda: tok("alice", ttl_s=1, now=1000), "token_expired"),
        ({}, lambda: tok("alice", SCOPE_READ), "token_scope"),
        ({}, lambda: tok("alice") + "x", "token_bad_signature"),
        ({}, lambda: "garbage", "token_malformed"),
    ],
)
def test_bad_tokens_are_refused_and_nothing_is_written(
    secured: Bus, body: dict[str, Any], token_of: Callable[[], str | None], code: str
) -> None:
    with pytest.raises(Unauthorized) as err:
        secured.send({"to_id": "bob", "text": "hi", **body}, token=token_of())
    assert err.value.code == code
    assert stored(secured, "bob") == 0


def test_a_revoked_token_is_refused(secured: Bus) -> None:
    token = secured.issue_token(session="alice", scopes=[SCOPE_WRITE])["token"]
    assert secured.send({"to_id": "bob", "text": "one"}, token=token)["state"] == "stored"
    secured.revoke_token(token)
    with pytest.raises(Unauthorized) as err:
        secured.send({"to_id": "bob", "text": "two"}, token=token)
    assert err.value.code == "token_revoked" and stored(secured, "bob") == 1


def test_a_token_for_x_cannot_read_or_act_for_y(secured: Bus) -> None:
    secured.send({"to_id": "bob", "text": "hi"}, token=tok("alice"))
    secured.deliver_session("bob")
    thread = secured.threads("bob", token=tok("bob", SCOPE_READ))["threads"][0]["threadId"]
    read_x = tok("alice", SCOPE_READ, SCOPE_WRITE)
    for call in (
        lambda: secured.threads("bob", token=read_x),
        lambda: secured.read("bob", thread, token=read_x),
        lambda: secured.reply("bob", thread, "forged reply", token=read_x),
    ):
        with pytest.raises(Unauthorized) as err:
            call()
        assert err.value.code == "token_subject"
    assert stored(secured, "alice") == 0  # the forged reply wrote nothing


def test_decisions_take_their_actor_from_the_token(secured: Bus) -> None:
    req = secured.request("bob", "task", "do it", token=tok("alice", SCOPE_THREAD))
    with pytest.raises(Unauthorized):
        secured.decide(req["thread"], "accept", actor="bob", token=tok("alice", SCOPE_THREAD))
    with pytest.raises(Unauthorized) as err:
        secured.decide(req["thread"], "accept", token=tok("bob", SCOPE_WRITE))
    assert err.value.code == "token_scope"
    out = secured.decide(req["thread"], "accept", token=tok("bob", SCOPE_THREAD))
    assert out["new_state"] == "CONFIRMED"


def test_without_a_secret_senders_are_marked_unverified_in_the_stamp(bus: Bus) -> None:
    bus.open_session("s")
    assert bus.settings.secret is None
    answer = bus.send({"from": "hosta:me", "to_id": "s", "text": "hi", "verified": True})
    assert answer["state"] == "stored"
    [line] = [json.loads(f["m"]) for _e, f in bus.store.queue.read_after("s", "0-0")]
    assert line["verified"] is False
    from bus.core.stamp import render_stamp

    assert "unverified" in render_stamp(line)


def test_token_cli_issue_and_revoke(settings: Settings) -> None:
    env = settings.child_env()
    env["INBOX_SECRET"] = SECRET
    env["INBOX_DISPATCHER"] = "none"

    def inbox(*args: str, extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "bus.surfaces.cli.app", *args],
            env={**env, **(extra or {})},
            capture_output=True,
            text=True,
            timeout=60,
        )

    for sid in ("alice", "bob"):
        assert inbox("session", "open", sid).returncode == 0
    issued = inbox("token", "issue", "--session", "alice", "--scopes", SCOPE_WRITE)
    assert issued.returncode == 0, issued.stderr
    token = json.loads(issued.stdout)["token"]
    ok = inbox("send", "--to-id", "bob", "--text", "hi", extra={"INBOX_TOKEN": token})
    assert ok.returncode == 0, ok.stderr
    forged = inbox(
        "send",
        "--to-id",
        "bob",
        "--from",
        "hosta:bob",
        "--text",
        "hi",
        extra={"INBOX_TOKEN": token},
    )
    assert forged.returncode == 1 and "claims to be from" in forged.stderr
    assert inbox("token", "revoke", token).returncode == 0
    refused = inbox("send", "--to-id", "bob", "--text", "hi", extra={"INBOX_TOKEN": token})
    assert refused.returncode == 1 and "revoked" in refused.stderr
    bad_scope = inbox("token", "issue", "--session", "alice", "--scopes", "agent:everything")
    assert bad_scope.returncode == 2
