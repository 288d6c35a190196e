"""Receipts and the outbox: the sender's side of a message (stored → noticed → read →
answered, side exits, stale recipients, waiting for a state), on every surface."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest

from bus.api import Bus
from bus.core.clock import ManualClock
from bus.core.errors import BadInput, NotFound, Unauthorized
from bus.core.models import now_ms
from bus.core.receipt_rules import (
    from_records,
    is_reached,
    receipt_state,
    recipient_state,
)
from bus.core.settings import Settings
from bus.delivery import scheduler
from bus.trust.tokens import SCOPE_READ, SCOPE_WRITE, issue
from tests.support.celery_bus import celery_bus
from tests.support.cli import inbox
from tests.support.gateway_server import Server
from tests.support.mcp_client import call, error_text, mcp_client, ok
from tests.support.sessions import pair, send
from tests.support.waiting import wait_for
from tests.support.worker_proc import WorkerProcess

HOUR_MS = 3600 * 1000

# -- pure rules ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reached", "state"),
    [
        ({}, "stored"),
        ({"stored": 1}, "stored"),
        ({"stored": 1, "noticed": 2}, "noticed"),
        ({"stored": 1, "read": 3}, "read"),  # read before any notice
        ({"stored": 1, "noticed": 2, "read": 3, "answered": 4}, "answered"),
        ({"stored": 1, "noticed": None}, "noticed"),  # reached, time unknown
        ({"stored": 1, "withdrawn": 2}, "withdrawn"),
        ({"stored": 1, "noticed": 2, "retracted": 3}, "retracted"),
        ({"bounced": 1}, "bounced"),
        ({"stored": 1, "noticed": 5, "expired": 4}, "expired"),  # drained after expiry
        ({"stored": 1, "expired": 4, "retracted": 6}, "retracted"),  # the latest exit
    ],
)
def test_receipt_state(reached: dict[str, int | None], state: str) -> None:
    assert receipt_state(reached) == state


@pytest.mark.parametrize(
    ("state", "want", "reached"),
    [
        ("stored", "noticed", False),
        ("noticed", "noticed", True),
        ("read", "noticed", True),
        ("noticed", "read", False),
        ("read", "answered", False),
        ("answered", "read", True),
        ("withdrawn", "answered", True),
        ("bounced", "noticed", True),
        ("expired", "read", True),
    ],
)
def test_is_reached(state: str, want: str, reached: bool) -> None:
    assert is_reached(state, want) is reached


@pytest.mark.parametrize(
    ("state", "last_seen", "now", "stale_s", "expected"),
    [
        (None, 0, 10, 60, "unknown"),
        ("idle", 1000, 2000, 60, "idle"),
        ("running", 1000, 1000 + 61_000, 60, "stale"),
        ("running", 1000, 1000 + 60_000, 60, "running"),  # exactly at the bound: not yet
        ("closed", 1000, 10**9, 60, "closed"),
        ("closing", 1000, 10**9, 60, "closing"),
        ("idle", 0, 10**9, 60, "idle"),  # never seen: nothing to judge by
    ],
)
def test_recipient_state(
    state: str | None, last_seen: int, now: int, stale_s: float, expected: str
) -> None:
    assert recipient_state(state, last_seen, now, stale_s) == expected


@pytest.mark.parametrize(
    ("stamped", "rec", "answer", "expected"),
    [
        ({"stored": 1}, None, None, {"stored": 1}),
        ({"stored": 1}, {"mark": "new"}, {"state": "stored"}, {"stored": 1}),
        ({"stored": 1}, {"mark": "noticed"}, None, {"stored": 1, "noticed": None}),
        ({"stored": 1, "noticed": 2}, {"mark": "noticed"}, None, {"stored": 1, "noticed": 2}),
        ({"stored": 1}, {"mark": "read"}, None, {"stored": 1, "noticed": None, "read": None}),
        # A turn end with no answer text answers nobody: noticed, not answered.
        (
            {"stored": 1},
            {"mark": "answered"},
            {"state": "answered"},
            {"stored": 1, "noticed": None},
        ),
        (
            {"stored": 1},
            {"mark": "answered", "answered_at": 9},
            {"state": "answered", "answer": "ok"},
            {"stored": 1, "noticed": None, "answered": 9},
        ),
        ({"stored": 1}, None, {"state": "withdrawn"}, {"stored": 1, "withdrawn": None}),
        ({"stored": 1}, {"mark": "removed"}, None, {"stored": 1, "withdrawn": None}),
        (
            {"stored": 1},
            {"mark": "retracted"},
            {"state": "retracted"},
            {"stored": 1, "noticed": None, "retracted": None},
        ),
        (
            {"stored": 1},
            {"mark": "expired", "expired_at": 7},
            None,
            {"stored": 1, "expired": 7},
        ),
    ],
)
def test_inbox_records_back_a_missed_stamp(
    stamped: dict[str, int],
    rec: dict[str, Any] | None,
    answer: dict[str, Any] | None,
    expected: dict[str, int | None],
) -> None:
    assert from_records(stamped, rec, answer) == expected


CLI = (sys.executable, "-m", "bus.surfaces.cli.app")

# -- helpers --------------------------------------------------------------------------------------


def waiting_on(b: Bus, msg_id: str) -> bool:
    """A receipt waiter for ``msg_id`` is blocked in Redis (its connection is named; on a
    cluster, on one of the masters)."""
    r = b.store.r
    lists = [r.client_list(target_nodes=n) for n in r.get_primaries()] if b.store.cluster else []
    return any(
        c.get("name") == f"inbox-wait:{msg_id}" and c.get("cmd") == "xread"
        for clients in lists or [r.client_list()]
        for c in clients
    )


# -- with real workers ----------------------------------------------------------------------------


@pytest.mark.slow
def test_a_message_through_every_state_with_a_real_worker(
    settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    start_worker(settings)
    b = celery_bus(settings)
    env = settings.child_env()
    pair(b)
    b.turn("bob", "start")  # running: the notice goes in at its next tool step
    sent = send(b)
    first = b.receipt(sent["id"], by="alice")
    assert first["state"] == "stored" and set(first["at"]) == {"stored"}
    assert (first["to"], first["thread"]) == ("bob", sent["thread"])
    assert first["recipient"]["session"] == "bob" and first["recipient"]["state"] == "running"

    wait_for(lambda: b.floor.peek("bob"), what="the notice on bob's floor")
    # Written to the file is not heard: only the drain that takes it is.
    assert b.receipt(sent["id"], by="alice")["state"] == "stored"
    b.drain("bob")
    assert b.receipt(sent["id"], by="alice")["state"] == "noticed"

    out = inbox(env, "read", "bob", sent["thread"], "--mark-read")
    assert out.returncode == 0, out.stderr
    assert b.receipt(sent["id"], by="alice")["state"] == "read"

    out = inbox(env, "turn", "bob", "end", "--answer", "done")
    assert out.returncode == 0, out.stderr
    out = inbox(env, "receipt", sent["id"], "--by", "alice")
    assert out.returncode == 0, out.stderr
    rc = json.loads(out.stdout)
    assert rc["ok"] is True and rc["state"] == "answered" and rc["answer"] == "done"
    at = rc["at"]
    assert list(at) == ["stored", "noticed", "read", "answered"]
    assert at["stored"] <= at["noticed"] <= at["read"] <= at["answered"]
    # A resend of the same id answers the same receipt.
    again = send(b, id=sent["id"])
    assert again["duplicate"] is True
    assert b.receipt(sent["id"], by="alice")["at"] == at


@pytest.mark.slow
def test_wait_for_returns_on_the_transition_through_a_worker(
    settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    start_worker(settings)
    b = celery_bus(settings)
    env = settings.child_env()
    pair(b)
    b.turn("bob", "start")
    sent = send(b)
    waiter = subprocess.Popen(
        [*CLI, "receipt", sent["id"], "--by", "alice", "--wait-for", "answered", "--timeout", "60"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: waiting_on(b, sent["id"]), what="the CLI waiter blocked")
        wait_for(lambda: b.floor.peek("bob"), what="the notice on bob's floor")
        b.drain("bob")
        b.turn("bob", "end", answer="done")
        stdout, stderr = waiter.communicate(timeout=30)
    finally:
        if waiter.poll() is None:
            waiter.kill()
    assert waiter.returncode == 0, stderr
    assert json.loads(stdout)["state"] == "answered"


# -- side exits, stale recipients, access ------------------------------------------------------


def test_a_withdrawn_and_a_retracted_message(bus: Bus) -> None:
    pair(bus)
    unsent = send(bus, text="never mind")
    assert bus.withdraw(unsent["id"], by="alice")["state"] == "unsent"
    rc = bus.receipt(unsent["id"], by="alice")
    assert rc["state"] == "withdrawn" and set(rc["at"]) == {"stored", "withdrawn"}

    bus.turn("bob", "start")
    noticed = send(bus, text="please look")
    bus.deliver_session("bob")
    bus.drain("bob")
    assert bus.receipt(noticed["id"], by="alice")["state"] == "noticed"
    assert bus.withdraw(noticed["id"], by="alice")["state"] == "retracted"
    rc = bus.receipt(noticed["id"], by="alice")
    assert rc["state"] == "retracted" and {"noticed", "retracted"} <= set(rc["at"])


def test_a_bounced_message_has_a_receipt_that_says_so(bus: Bus) -> None:
    bus.open_session("alice")
    answer = send(bus, to="nobody")
    assert answer["state"] == "bounced"
    rc = bus.receipt(answer["id"], by="alice")
    assert rc["state"] == "bounced" and rc["to"] == "nobody"
    assert "nobody" in rc["reason"] and rc["recipient"]["state"] == "unknown"
    # Once the session exists, a resend of the same id is stored and the receipt follows.
    bus.open_session("nobody")
    assert send(bus, to="nobody", id=answer["id"])["state"] == "stored"
    assert bus.receipt(answer["id"], by="alice")["state"] == "stored"


def test_a_stale_recipients_answer_and_receipt(bus: Bus) -> None:
    pair(bus)
    long_ago = now_ms() - 2 * HOUR_MS  # bob's harness last seen two hours ago
    bus.store.sessions.update_session("bob", last_seen=long_ago)
    answer = send(bus)
    assert answer["ok"] is True and answer["state"] == "stored"
    assert answer["recipient"]["state"] == "stale"
    assert answer["recipient"]["last_seen"] == long_ago
    assert bus.store.queue.read_after("bob", "0-0")  # still stored
    rc = bus.receipt(answer["id"], by="alice")
    # No worker ever served bob's host in this test: the receipt says the message waits
    # for one.
    assert rc["recipient"] == {
        "session": "bob",
        "state": "stale",
        "last_seen": long_ago,
        "host_state": "unseen",
    }
    assert "no worker has served" in rc["waiting"]
    bus.drain("bob")  # the harness is back
    fresh = send(bus, text="again")["recipient"]
    assert fresh["state"] == "idle" and fresh["last_seen"] > long_ago


def test_only_the_sender_reads_a_receipt(bus: Bus, settings: Settings) -> None:
    pair(bus)
    bus.open_session("carol")
    sent = send(bus)
    with pytest.raises(NotFound) as refused:
        bus.receipt(sent["id"], by="carol")
    assert refused.value.code == "not_found"  # as for an unknown id: no existence oracle
    with pytest.raises(BadInput):
        bus.receipt("../etc/passwd", by="alice")
    with pytest.raises(NotFound):
        bus.receipt("no-such-message", by="alice")

    env = {**settings.child_env(), "INBOX_DISPATCHER": "none", "INBOX_SESSION": "carol"}
    out = inbox(env, "receipt", sent["id"])
    assert out.returncode == 1 and out.stderr.count("\n") == 1
    assert json.loads(out.stdout)["error"] == "not_found"
    env["INBOX_SESSION"] = "alice"
    out = inbox(env, "receipt", sent["id"])
    assert out.returncode == 0 and json.loads(out.stdout)["state"] == "stored"
    bad = inbox(env, "receipt", sent["id"], "--wait-for", "sideways")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1


def test_with_a_secret_the_token_subject_is_the_reader(make_bus: Callable[..., Bus]) -> None:
    secret = "receipt-secret-0123456789"
    b = make_bus(secret=secret)
    pair(b)
    alice = issue(secret, session="alice", scopes=[SCOPE_WRITE, SCOPE_READ])
    bob = issue(secret, session="bob", scopes=[SCOPE_READ])
    sent = b.send({"to_id": "bob", "text": "hi"}, token=alice)
    assert b.receipt(sent["id"], token=alice)["state"] == "stored"
    with pytest.raises(NotFound):  # as for an unknown id
        b.receipt(sent["id"], token=bob)
    with pytest.raises(Unauthorized):
        b.receipt(sent["id"], by="alice", token=bob)  # naming someone else is not enough
    with pytest.raises(Unauthorized):
        b.receipt(sent["id"], by="alice")  # no token at all
    with pytest.raises(Unauthorized):
        b.sent("alice", token=bob)
    assert [r["id"] for r in b.sent("alice", token=alice)["sent"]] == [sent["id"]]


# -- the outbox ----------------------------------------------------------------------------------


def test_the_outbox_lists_newest_first_and_filters_by_state(bus: Bus, settings: Settings) -> None:
    pair(bus)
    ids = [send(bus, text=f"msg {n}", topic=f"t{n}")["id"] for n in range(3)]
    bus.withdraw(ids[1], by="alice")
    bounced = send(bus, to="nobody")["id"]
    bus.send({"from": "hosta:bob", "from_session": "bob", "to_id": "alice", "text": "not hers"})
    listing = bus.sent("alice")["sent"]
    assert [r["id"] for r in listing] == [bounced, ids[2], ids[1], ids[0]]
    assert all(r["ok"] and "state" in r and "at" in r for r in listing)
    assert [r["id"] for r in bus.sent("alice", state="withdrawn")["sent"]] == [ids[1]]
    assert [r["id"] for r in bus.sent("alice", state="bounced")["sent"]] == [bounced]
    assert [r["id"] for r in bus.sent("alice", limit=2)["sent"]] == [r["id"] for r in listing[:2]]
    assert [r["to"] for r in bus.sent("bob")["sent"]] == ["alice"]
    with pytest.raises(BadInput):
        bus.sent("alice", state="sideways")
    with pytest.raises(BadInput):
        bus.sent("alice", limit=0)

    env = {**settings.child_env(), "INBOX_DISPATCHER": "none"}
    out = inbox(env, "sent", "alice", "--state", "stored", "--limit", "1")
    assert out.returncode == 0, out.stderr
    assert [r["id"] for r in json.loads(out.stdout)["sent"]] == [ids[2]]
    assert inbox(env, "sent", "alice", "--state", "sideways").returncode == 2


# -- waiting --------------------------------------------------------------------------------------


def test_wait_for_returns_on_the_transition_and_on_its_timeout(bus: Bus) -> None:
    pair(bus)
    bus.turn("bob", "start")
    sent = send(bus)
    got: list[dict[str, Any]] = []
    waiter = threading.Thread(
        target=lambda: got.append(
            bus.receipt(sent["id"], by="alice", wait_for="noticed", timeout=60)
        ),
        daemon=True,
    )
    waiter.start()
    wait_for(lambda: waiting_on(bus, sent["id"]), what="the waiter blocked")
    bus.deliver_session("bob")  # the notice goes to the floor: not yet noticed
    bus.drain("bob")
    waiter.join(30)
    assert not waiter.is_alive() and got[0]["state"] == "noticed" and got[0]["ok"] is True

    late = bus.receipt(sent["id"], by="alice", wait_for="read", timeout=0.2)
    assert late["ok"] is False and late["error"] == "timeout" and late["state"] == "noticed"


def test_a_side_exit_ends_a_wait(bus: Bus) -> None:
    pair(bus)
    sent = send(bus)
    got: list[dict[str, Any]] = []
    waiter = threading.Thread(
        target=lambda: got.append(bus.receipt(sent["id"], by="alice", wait_for="read", timeout=60)),
        daemon=True,
    )
    waiter.start()
    wait_for(lambda: waiting_on(bus, sent["id"]), what="the waiter blocked")
    bus.withdraw(sent["id"], by="alice")
    waiter.join(30)
    assert got and got[0]["state"] == "withdrawn"


def test_the_cli_wait_times_out_with_one_line(bus: Bus, settings: Settings) -> None:
    pair(bus)
    sent = send(bus)
    env = {**settings.child_env(), "INBOX_DISPATCHER": "none"}
    out = inbox(
        env, "receipt", sent["id"], "--by", "alice", "--wait-for", "read", "--timeout", "0.2"
    )
    assert out.returncode == 1 and out.stderr.count("\n") == 1
    body = json.loads(out.stdout)
    assert body["ok"] is False and body["error"] == "timeout" and body["state"] == "stored"


# -- expiry ----------------------------------------------------------------------------------------


def test_messages_unnoticed_past_the_bound_end_expired(make_bus: Callable[..., Bus]) -> None:
    # A message is stored with the bus's time (never its sender's ts): sent from last week.
    clock = ManualClock(now_ms() - 8 * 24 * HOUR_MS)
    b = make_bus(expire_s=3600.0, clock=clock)
    pair(b)
    b.turn("bob", "start")
    # A notice written to the floor that no drain ever takes (the harness is gone).
    old = send(b, text="from last week")
    clock.set(now_ms())
    fresh = send(b, text="from today")
    b.deliver_session("bob")
    assert b.floor.peek("bob")
    assert scheduler.tick(b.delivery, sweep=True)["expired"] == 1
    assert b.receipt(old["id"], by="alice")["state"] == "expired"
    assert b.receipt(fresh["id"], by="alice")["state"] == "stored"
    assert [r["id"] for r in b.sent("alice", state="expired")["sent"]] == [old["id"]]
    # Waiting in the inbox (never carried by a notice) past the bound: expired too, and
    # no later notice carries it.
    quick = make_bus(expire_s=0.001)
    b.turn("bob", "end")
    idle = send(b, text="an fyi nobody reads", **{"class": "fyi"})
    b.deliver_session("bob")
    assert b.store.r.zscore(b.store.k.s("bob", "new"), idle["id"]) is not None

    # Each pass expires what is past the bound by then (the notice's messages from today
    # may go first, in the very millisecond the fyi arrived): passes until it is too.
    def idle_expired() -> bool:
        quick.receipts.expire("bob")
        return bool(b.receipt(idle["id"], by="alice")["state"] == "expired")

    wait_for(idle_expired, what="the queued message to expire")
    assert b.store.r.zscore(b.store.k.s("bob", "new"), idle["id"]) is None


# -- MCP and HTTP -------------------------------------------------------------------------------


def test_the_gateway_answers_a_receipt_to_its_sender_only(
    make_bus: Callable[..., Bus],
    gateway: Callable[[Bus], Server],
) -> None:
    secret = "gw-receipt-secret-0123456789"
    b = make_bus(secret=secret)
    pair(b)
    alice = issue(secret, session="alice", scopes=[SCOPE_WRITE, SCOPE_READ])
    bob = issue(secret, session="bob", scopes=[SCOPE_READ])
    sent = b.send({"to_id": "bob", "text": "hi"}, token=alice)
    client = gateway(b).client
    url = f"/v1/messages/{sent['id']}"
    ok = client.get(url, headers={"Authorization": f"Bearer {alice}"})
    assert ok.status_code == 200 and ok.json()["state"] == "stored"
    refused = client.get(url, headers={"Authorization": f"Bearer {bob}"})
    assert refused.status_code == 404 and refused.json()["error"] == "not_found"
    assert client.get(url).status_code == 401
    assert client.get(url, params={"by": "alice"}).status_code == 401  # no token, no answer
    bad = client.get("/v1/messages/bad%20id", headers={"Authorization": f"Bearer {alice}"})
    assert bad.status_code == 400 and bad.json()["ok"] is False


def test_the_gateway_without_a_secret_needs_the_sender_named(
    bus: Bus,
    gateway: Callable[[Bus], Server],
) -> None:
    pair(bus)
    sent = send(bus)
    client = gateway(bus).client
    url = f"/v1/messages/{sent['id']}"
    assert client.get(url).status_code == 400
    assert client.get(url, params={"by": "bob"}).status_code == 404
    assert client.get(url, params={"by": "alice"}).json()["state"] == "stored"


@pytest.mark.anyio
async def test_receipt_and_sent_through_mcp(settings: Settings, bus: Bus) -> None:
    bus.open_session("me", handle="hosta:me")
    bus.open_session("peer", handle="hosta:peer")
    async with mcp_client(settings, "me") as me:
        sent = ok(await call(me, "send", handle="hosta:peer", text="look"))
        rc = ok(await call(me, "receipt", message_id=sent["id"]))
        late = await call(me, "receipt", message_id=sent["id"], wait_for="noticed", timeout=0.2)
        outbox = ok(await call(me, "sent", state="stored"))
    async with mcp_client(settings, "peer") as peer:
        refused = await call(peer, "receipt", message_id=sent["id"])
        theirs = ok(await call(peer, "sent"))
    assert rc["state"] == "stored" and rc["to"] == "peer"
    assert late.is_error and late.structured_content["error"] == "timeout"  # type: ignore[index]
    assert [r["id"] for r in outbox["sent"]] == [sent["id"]]
    assert "not_found" in error_text(refused)
    assert theirs["sent"] == []


def test_the_receipt_adds_no_round_trip_to_a_send(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    import redis.client

    if bus.store.cluster:
        pytest.skip(
            "counts a standalone client's calls; on a cluster the batch's keys are in several "
            "slots, one pipeline a node (tests/integration/cluster/test_cluster_batch.py counts those)"
        )
    pair(bus)
    send(bus, text="warm up")  # scripts loaded, connection made
    trips: list[str] = []
    real_command = redis.client.Redis.execute_command
    real_pipeline = redis.client.Pipeline.execute

    def command(self: Any, *args: Any, **kw: Any) -> Any:
        trips.append(str(args[0]))
        return real_command(self, *args, **kw)

    def pipeline(self: Any, *args: Any, **kw: Any) -> Any:
        trips.append("pipeline")
        return real_pipeline(self, *args, **kw)

    real_packed = bus.store.run_packed

    def packed(commands: list[tuple[Any, ...]]) -> list[Any]:  # a pipeline sent packed
        trips.append("pipeline")
        return real_packed(commands)

    monkeypatch.setattr(redis.client.Redis, "execute_command", command)
    monkeypatch.setattr(redis.client.Pipeline, "execute", pipeline)
    monkeypatch.setattr(bus.store, "run_packed", packed)
    sent = send(bus)
    monkeypatch.undo()
    # The sender's rate bucket (rate.lua), the recipient's session with its wake fact
    # about the sending session (one pipeline), then ONE pipeline: the append (which
    # opens the receipt), index, outbox. The receipt adds nothing of its own.
    assert trips == ["EVALSHA", "pipeline", "pipeline"]
    assert bus.receipt(sent["id"], by="alice")["state"] == "stored"
    assert [r["id"] for r in bus.sent("alice", limit=1)["sent"]] == [sent["id"]]


def test_a_drain_while_redis_is_down_still_shows_noticed(make_bus: Callable[..., Bus]) -> None:
    b = make_bus()
    pair(b)
    b.turn("bob", "start")
    sent = send(b)
    b.deliver_session("bob")
    down = make_bus(redis_url="redis://127.0.0.1:1/0")  # same floor, no Redis
    assert down.drain("bob")  # the harness drains; the marks wait in marks.pending.jsonl
    assert b.receipt(sent["id"], by="alice")["state"] == "stored"
    b.drain("bob")  # Redis is back: the marks catch up
    rc = b.receipt(sent["id"], by="alice")
    # The marks carry the time they reached Redis (the drain itself had no Redis to tell).
    assert rc["state"] == "noticed" and rc["at"]["noticed"] >= rc["at"]["stored"]
