"""Batched ingest (bus/ingest.py): Bus.send_many, inbox send --jsonl, POST /v1/send/batch."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest

from bus.api import Bus
from bus.dispatch import RecordingDispatcher
from bus.errors import BadInput, Unauthorized
from tests.conftest import settings_env


def msgs(prefix: str, n: int = 6) -> list[dict[str, Any]]:
    """Messages to s1 and s2 (and one to an unknown session), with fixed ids and stamps."""
    out = []
    for i in range(n):
        out.append(
            {
                "id": f"{prefix}-{i}",
                "ts": 1_700_000_000_000 + i,
                "from": f"neo:lane{i % 2}",
                "to_id": "s1" if i % 3 else "s2",
                "text": f"message {i}" + (" about PR #12" if i == 4 else ""),
                **({"topic": "deploy"} if i == 5 else {}),
            }
        )
    out.append({"id": f"{prefix}-x", "from": "neo:lane0", "to_id": "ghost", "text": "hello?"})
    return out


def without_id(answer: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in answer.items() if k != "id"}


def stored(b: Bus, sid: str) -> list[dict[str, Any]]:
    """The wire messages in ``sid``'s queue, ids and nothing else masked."""
    rows = b.store.read_after(sid, "0-0", 1000)
    return [{**json.loads(f["m"]), "id": f["id"].split("-")[-1]} for _e, f in rows]


def received(b: Bus, sid: str) -> list[str]:
    events = b.store.r.xrange(b.store.k.s(sid, "events"))
    return [f["id"] for _e, f in events if f["kind"] == "inbox_received"]


@pytest.fixture
def two(bus: Bus) -> Bus:
    bus.open_session("s1")
    bus.open_session("s2")
    bus.turn("s2", "start")
    return bus


def test_batch_answers_and_stores_what_a_send_per_message_does(two: Bus) -> None:
    singles = [two.send(m) for m in msgs("one")]
    batch = two.send_many(msgs("many"))
    assert [a["id"] for a in batch] == [m["id"] for m in msgs("many")]
    assert [without_id(a) for a in batch] == [without_id(a) for a in singles]
    assert batch[-1]["state"] == "bounced" and batch[0]["state"] == "stored"
    for sid in ("s1", "s2"):
        one = [m for m in stored(two, sid) if m["id"] != "x"]
        half = len(one) // 2
        assert one[:half] == one[half:]  # the batch stored the same messages, in order
        to_sid = [m["id"].split("-")[-1] for m in msgs("x") if m["to_id"] == sid]
        assert received(two, sid) == [f"one-{i}" for i in to_sid] + [f"many-{i}" for i in to_sid]
        assert two.store.recipient_of("many-1") == "s1"


def test_resends_are_idempotent_and_answer_as_single_sends_do(two: Bus) -> None:
    first = two.send_many(msgs("a"))
    again = two.send_many(msgs("a"))
    single_again = [two.send(m) for m in msgs("a")]
    stored_ok = [a for a in first if a["state"] == "stored"]
    assert [a for a in again if a["state"] == "stored"] == [
        {**a, "duplicate": True} for a in stored_ok
    ]
    assert again == single_again
    assert len(stored(two, "s1")) + len(stored(two, "s2")) == len(stored_ok)
    # The same id twice in one batch: stored once, the second answered as a resend.
    twice = two.send_many([msgs("b")[1], msgs("b")[1]])
    assert twice[1] == {**twice[0], "duplicate": True}
    assert [m["id"] for m in stored(two, "s1")].count("1") == 2  # a-1 and b-1, once each


def test_a_bad_item_refuses_the_whole_batch_and_writes_nothing(two: Bus) -> None:
    def keys() -> set[str]:
        return set(two.store.r.scan_iter(match=two.store.k.pattern()))

    before = keys()
    assert isinstance(two.dispatcher, RecordingDispatcher)
    calls = list(two.dispatcher.calls)
    batch = msgs("bad")
    batch[2] = {**batch[2], "to_id": "../etc"}
    batch[4] = {**batch[4], "colour": "red"}
    batch[5] = "not an object"  # type: ignore[call-overload]
    with pytest.raises(BadInput) as err:
        two.send_many(batch)
    out = err.value.to_json()
    assert out["error"] == "bad_input" and out["index"] == 2
    assert [e["index"] for e in out["errors"]] == [2, 4, 5]
    assert "unknown field 'colour'" in out["errors"][1]["message"]
    assert "3 of 7 messages refused, nothing was written" in out["message"]
    assert keys() <= before  # nothing new (a dispatch flag from turn() may have expired)
    assert all(two.store.r.xlen(two.store.k.s(sid, "stream")) == 0 for sid in ("s1", "s2"))
    assert two.dispatcher.calls == calls


def test_one_dispatch_per_session_per_batch(make_bus: Callable[..., Bus]) -> None:
    b = make_bus()
    for sid in ("s1", "s2"):
        b.open_session(sid)
    assert isinstance(b.dispatcher, RecordingDispatcher)
    many = [{"from": "neo:x", "to_id": f"s{1 + i % 2}", "text": f"m{i}"} for i in range(40)]
    b.send_many(many)
    assert sorted(b.dispatcher.calls) == [("hosta", "s1"), ("hosta", "s2")]
    # A delivery is still pending for both: the next batch adds to it, no new dispatch.
    b.send_many(many[:4])
    assert len(b.dispatcher.calls) == 2
    b.deliver_session("s1")  # the delivery started (and cleared the flag): dispatch anew
    b.send_many(many[:4])
    assert sorted(b.dispatcher.calls[2:]) == [("hosta", "s1")]


def test_a_batch_resolves_handles_and_takes_the_sender_from_the_token(
    make_bus: Callable[..., Bus],
) -> None:
    from bus.auth import SCOPE_WRITE, issue

    secret = "ingest-secret-0123456789"
    b = make_bus(secret=secret)
    b.open_session("alice", handle="neo:alice")
    b.open_session("bob", handle="neo:bob")
    batch = [{"to": "neo:bob", "text": f"m{i}"} for i in range(3)]
    with pytest.raises(Unauthorized):
        b.send_many(batch)
    token = issue(secret, session="alice", scopes=[SCOPE_WRITE])
    answers = b.send_many(batch, token=token)
    assert [a["recipient"]["session"] for a in answers] == ["bob"] * 3
    assert {m["from"] for m in stored(b, "bob")} == {"neo:alice"}
    assert all(m["verified"] for m in stored(b, "bob"))
    forged = [*batch, {"to": "neo:bob", "from": "neo:bob", "text": "me"}]
    with pytest.raises(BadInput) as err:
        b.send_many(forged, token=token)
    [bad] = err.value.to_json()["errors"]
    assert (bad["index"], bad["error"]) == (3, "forged_from")
    assert len(stored(b, "bob")) == 3


def test_jsonl_refuses_bad_lines_by_number_and_sends_the_rest(
    two: Bus, settings: Any, home: Any
) -> None:
    lines = [json.dumps({"from": "h:me", "to_id": "s1", "text": f"m{i}"}) for i in range(4)]
    lines[1] = "{not json"
    lines[2] = json.dumps({"from": "h:me", "to_id": "s1", "text": ""})
    env = {**settings_env(settings), "INBOX_DISPATCHER": "none"}
    out = subprocess.run(
        [sys.executable, "-m", "bus.cli", "send", "--jsonl", "-"],
        input="\n".join(lines) + "\n\n",
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    answers = [json.loads(x) for x in out.stdout.splitlines()]
    assert out.returncode == 1
    assert [a.get("state") or a["error"] for a in answers] == [
        "stored",
        "bad_input",
        "bad_input",
        "stored",
    ]
    assert [a.get("line") for a in answers] == [None, 2, 3, None]
    assert [m["text"] for m in stored(two, "s1")] == ["m0", "m3"]


def test_http_batch_route_answers_each_and_refuses_a_bad_batch_whole(
    make_bus: Callable[..., Bus],
) -> None:
    from bus.auth import SCOPE_WRITE, issue
    from tests.test_http import Gateway

    secret = "batch-secret-0123456789"
    b = make_bus(secret=secret)
    b.open_session("alice", handle="neo:alice")
    b.open_session("bob")
    g = Gateway(b)
    try:
        body = [{"to_id": "bob", "text": f"m{i}"} for i in range(3)]
        assert g.client.post("/v1/send/batch", json=body).status_code == 401  # no token
        auth = {"Authorization": f"Bearer {issue(secret, session='alice', scopes=[SCOPE_WRITE])}"}
        ok = g.client.post("/v1/send/batch", json={"messages": body}, headers=auth)
        assert ok.status_code == 200 and ok.json()["ok"] is True
        assert [a["state"] for a in ok.json()["answers"]] == ["stored"] * 3
        bad = g.client.post(
            "/v1/send/batch", json=[*body, {"to_id": "bob", "text": ""}], headers=auth
        )
        assert bad.status_code == 400 and bad.json()["index"] == 3
        not_a_list = g.client.post("/v1/send/batch", json={"to_id": "bob"}, headers=auth)
        assert not_a_list.status_code == 400 and not_a_list.json()["error"] == "bad_input"
        assert len(stored(b, "bob")) == 3
    finally:
        g.stop()


def test_jsonl_answers_a_line_before_the_next_is_written(two: Bus, settings: Any) -> None:
    env = {**settings_env(settings), "INBOX_DISPATCHER": "none"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "bus.cli", "send", "--jsonl", "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    killer = threading.Timer(60, proc.kill)  # bounds the blocking reads below
    killer.start()
    try:
        assert proc.stdin is not None and proc.stdout is not None
        for i in range(2):
            proc.stdin.write(json.dumps({"from": "h:me", "to_id": "s1", "text": f"m{i}"}) + "\n")
            proc.stdin.flush()
            assert json.loads(proc.stdout.readline())["state"] == "stored"
        proc.stdin.close()
        assert proc.wait(30) == 0
    finally:
        killer.cancel()
        proc.kill()
    assert [m["text"] for m in stored(two, "s1")] == ["m0", "m1"]
