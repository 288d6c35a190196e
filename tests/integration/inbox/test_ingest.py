"""Batched ingest (bus/services/send_many.py): Bus.send_many, inbox send --jsonl, POST /v1/send/batch."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest

from bus.api import Bus
from bus.core.errors import BadInput, BusError, Unauthorized
from bus.core.models import now_ms
from bus.core.settings import Settings
from bus.delivery.dispatch import RecordingDispatcher
from bus.store import packing


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
    rows = b.store.queue.read_after(sid, "0-0", 1000)
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


def send_jsonl(
    settings: Settings, lines: list[str], **env: str
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """``inbox send --jsonl -`` as a user runs it, one line a message; its answers."""
    out = subprocess.run(
        [sys.executable, "-m", "bus.surfaces.cli.app", "send", "--jsonl", "-"],
        input="\n".join(lines) + "\n",
        env={**settings.child_env(), "INBOX_DISPATCHER": "none", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    return out, [json.loads(x) for x in out.stdout.splitlines()]


def test_batch_answers_and_stores_what_a_send_per_message_does(two: Bus) -> None:
    singles = [two.send(m) for m in msgs("one")]
    batch = two.send_many(msgs("many"))
    assert [a["id"] for a in batch] == [m["id"] for m in msgs("many")]
    assert [without_id(a) for a in batch] == [without_id(a) for a in singles]
    assert batch[-1]["state"] == "bounced" and batch[0]["state"] == "stored"
    for sid in ("s1", "s2"):
        # The stored ts is the server's clock at each send, not the sender's.
        one = [
            {k: v for k, v in m.items() if k != "ts"} for m in stored(two, sid) if m["id"] != "x"
        ]
        half = len(one) // 2
        assert one[:half] == one[half:]  # the batch stored the same messages, in order
        to_sid = [m["id"].split("-")[-1] for m in msgs("x") if m["to_id"] == sid]
        assert received(two, sid) == [f"one-{i}" for i in to_sid] + [f"many-{i}" for i in to_sid]
        assert two.store.queue.recipient_of("many-1") == "s1"


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
    # The kick list wraps the recording dispatcher; with no delivery loop alive every
    # kick goes to it.
    assert isinstance(getattr(two.dispatcher, "fallback", two.dispatcher), RecordingDispatcher)
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
    assert isinstance(getattr(b.dispatcher, "fallback", b.dispatcher), RecordingDispatcher)
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
    from bus.trust.tokens import SCOPE_WRITE, issue

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
    out, answers = send_jsonl(settings, [*lines, ""])
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
    from bus.surfaces.http.gateway import create_app
    from bus.trust.tokens import SCOPE_WRITE, issue
    from tests.support.gateway_server import Server

    secret = "batch-secret-0123456789"
    b = make_bus(secret=secret)
    b.open_session("alice", handle="neo:alice")
    b.open_session("bob")
    g = Server(create_app(b))
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
    env = {**settings.child_env(), "INBOX_DISPATCHER": "none"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "bus.surfaces.cli.app", "send", "--jsonl", "-"],
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


# -- the guarantees a send per message gives (issues 9 and 14) ------------------------------


def per_message(b: Bus, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What ``Bus.send`` answers for each item, a refusal as its JSON (plus the id)."""
    out = []
    for item in items:
        try:
            out.append(b.send(item))
        except BusError as exc:
            out.append({**exc.to_json(), "id": item["id"]})
    return out


def masked(answers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Answers without ``last_seen`` (each bus opened its sessions at its own ms)."""
    out = []
    for a in answers:
        rcpt = {k: v for k, v in (a.get("recipient") or {}).items() if k != "last_seen"}
        out.append({**a, **({"recipient": rcpt} if "recipient" in a else {})})
    return out


def receipt_of(b: Bus, msg_id: str, by: str) -> dict[str, Any]:
    """A receipt with the times replaced by which states have one."""
    rc = b.receipt(msg_id, by=by)
    return {**rc, "at": sorted(rc["at"]), "recipient": masked([rc])[0]["recipient"]}


def twin_buses(make_bus: Callable[..., Bus], prefix: str, **kw: Any) -> tuple[Bus, Bus]:
    """Two buses on separate key spaces (under the test's prefix) with the same sessions:
    one takes a send per message, the other the batch."""
    pair = []
    for tag in ("one", "many"):
        b = make_bus(key_prefix=f"{prefix}:{tag}", **kw)
        for sid in ("alice", "s1", "s2"):
            b.open_session(sid)
        pair.append(b)
    return pair[0], pair[1]


def outbox(b: Bus, sid: str) -> list[str]:
    return [r["id"] for r in b.sent(sid, limit=100)["sent"]]


def from_alice(n: int, to: str = "s1") -> list[dict[str, Any]]:
    return [
        {
            "id": f"al-{i}",
            "from": "hosta:alice",
            "from_session": "alice",
            "to_id": to,
            "text": f"m{i}",
        }
        for i in range(n)
    ]


def test_receipts_outbox_and_bounces_are_what_sends_leave(
    make_bus: Callable[..., Bus], prefix: str
) -> None:
    one, many = twin_buses(make_bus, prefix)
    items = [
        *from_alice(3),
        {
            "id": "to-s2",
            "from": "hosta:alice",
            "from_session": "alice",
            "to_id": "s2",
            "text": "PR #4 ready",
        },
        {
            "id": "nobody",
            "from": "hosta:alice",
            "from_session": "alice",
            "to_id": "ghost",
            "text": "hello?",
        },
        from_alice(1)[0],  # a resend in the same batch
    ]
    singles, batch = per_message(one, items), many.send_many(items)
    assert masked(batch) == masked(singles)
    assert batch[4]["state"] == "bounced" and batch[5]["duplicate"] is True
    for i in ("al-0", "al-1", "al-2", "to-s2", "nobody"):
        assert receipt_of(many, i, "alice") == receipt_of(one, i, "alice")
        assert many.store.queue.recipient_of(i) == one.store.queue.recipient_of(i)
    assert receipt_of(many, "nobody", "alice")["state"] == "bounced"
    assert receipt_of(many, "al-1", "alice")["state"] == "stored"
    assert (
        outbox(many, "alice") == outbox(one, "alice") == ["nobody", "to-s2", "al-2", "al-1", "al-0"]
    )


def test_a_stale_recipient_is_answered_stale_with_its_last_seen(
    make_bus: Callable[..., Bus], prefix: str
) -> None:
    one, many = twin_buses(make_bus, prefix, stale_s=60.0)
    for b in (one, many):
        b.store.r.hset(b.store.k.s("s1", "session"), "last_seen", "1000")
    singles, batch = per_message(one, from_alice(2)), many.send_many(from_alice(2))
    assert batch == singles
    assert batch[0]["recipient"]["state"] == "stale"
    assert batch[0]["recipient"]["last_seen"] == 1000


def test_a_full_inbox_refuses_what_does_not_fit_as_sends_do(
    make_bus: Callable[..., Bus], prefix: str
) -> None:
    one, many = twin_buses(make_bus, prefix, max_unread=3)
    items = [*from_alice(5), *from_alice(1, to="s2"), from_alice(1)[0]]
    items[5] = {**items[5], "id": "to-s2"}
    singles, batch = per_message(one, items), many.send_many(items)
    assert masked(batch) == masked(singles)
    assert [a.get("state") or a["error"] for a in batch] == [
        "stored",
        "stored",
        "stored",
        "inbox_full",
        "inbox_full",
        "stored",
        "stored",
    ]
    assert batch[3] == {
        "ok": False,
        "error": "inbox_full",
        "message": "session s1 holds 3 messages already; nothing was stored",
        "session": "s1",
        "id": "al-3",
    }
    for b in (one, many):
        assert [m["id"] for m in stored(b, "s1")] == ["0", "1", "2"]
        assert b.store.queue.recipient_of("al-3") is None
        # Refused: no receipt, and nothing in the sender's outbox.
        assert b.store.receipts.receipts_exist([("s1", "al-3"), ("s1", "al-2")]) == [False, True]
        assert b.store.r.zcard(b.store.k.outbox("alice")) == 4
    assert outbox(many, "alice") == outbox(one, "alice")


def test_a_batch_over_the_senders_rate_is_refused_whole(make_bus: Callable[..., Bus]) -> None:
    from bus.core.errors import RateLimited

    b = make_bus(send_rate=0.001, send_burst=3)
    b.open_session("s1")
    batch = [{"from": "h:flood", "to_id": "s1", "text": f"m{i}"} for i in range(4)]
    before = set(b.store.r.scan_iter(match=b.store.k.pattern()))
    with pytest.raises(RateLimited) as err:
        b.send_many(batch)
    assert err.value.code == "rate_limited" and "a batch of 4" in str(err.value)
    assert "split it" in str(err.value)  # 4 is more than the burst: it never fits
    assert set(b.store.r.scan_iter(match=b.store.k.pattern())) - before <= {
        b.store.k.bucket("h:flood")
    }
    assert stored(b, "s1") == []
    # Two senders: one short refuses the batch, and the other's tokens are given back.
    mixed = [*batch[:2], *[{"from": "h:calm", "to_id": "s1", "text": f"c{i}"} for i in range(4)]]
    with pytest.raises(RateLimited):
        b.send_many(mixed)
    assert stored(b, "s1") == []
    assert [a["state"] for a in b.send_many(batch[:3])] == ["stored"] * 3
    with pytest.raises(RateLimited):  # the bucket is empty now, as after three sends
        b.send({"from": "h:flood", "to_id": "s1", "text": "one more"})
    assert len(stored(b, "s1")) == 3


def test_the_http_batch_is_429_over_the_rate(make_bus: Callable[..., Bus]) -> None:
    from bus.surfaces.http.gateway import create_app
    from tests.support.gateway_server import Server

    b = make_bus(send_rate=0.001, send_burst=2)
    b.open_session("bob")
    g = Server(create_app(b))
    try:
        body = [{"from": "h:me", "to_id": "bob", "text": f"m{i}"} for i in range(3)]
        r = g.client.post("/v1/send/batch", json=body)
        assert r.status_code == 429 and r.json()["error"] == "rate_limited"
        assert stored(b, "bob") == []
    finally:
        g.stop()


def test_jsonl_takes_what_the_bucket_holds_and_refuses_each_line_after(
    two: Bus, settings: Any
) -> None:
    lines = [json.dumps({"from": "h:me", "to_id": "s1", "text": f"m{i}"}) for i in range(5)]
    out, answers = send_jsonl(settings, lines, INBOX_SEND_RATE="0.001", INBOX_SEND_BURST="3")
    assert out.returncode == 1
    assert [a.get("state") or a["error"] for a in answers] == [
        "stored",
        "stored",
        "stored",
        "rate_limited",
        "rate_limited",
    ]
    assert [a.get("line") for a in answers] == [None, None, None, 4, 5]
    assert [m["text"] for m in stored(two, "s1")] == ["m0", "m1", "m2"]


def test_naming_a_thread_one_is_no_party_to_refuses_the_batch(bus: Bus) -> None:
    from bus.core.errors import Refused

    for sid in ("alice", "bob", "mallory"):
        bus.open_session(sid)
    first = bus.send({"from": "hosta:alice", "from_session": "alice", "to_id": "bob", "text": "hi"})
    bus.deliver_session("bob")  # the thread exists now, its parties alice and bob
    thread = first["thread"]
    intruder = {
        "from": "hosta:mallory",
        "from_session": "mallory",
        "to_id": "bob",
        "text": "let me in",
        "thread": thread,
    }
    with pytest.raises(Refused) as single:
        bus.send(intruder)
    ok = {
        "from": "hosta:alice",
        "from_session": "alice",
        "to_id": "bob",
        "text": "more",
        "thread": thread,
    }
    with pytest.raises(BadInput) as err:
        bus.send_many([ok, intruder])
    [bad] = err.value.to_json()["errors"]
    assert bad == {"index": 1, "error": "not_a_party", "message": str(single.value)}
    # One message ever stored (its send answer and receipt; the delivered queue was emptied).
    assert len(bus.store.r.hkeys(bus.store.k.s("bob", "ids"))) == 2
    assert bus.store.r.hget(bus.store.k.s("bob", "ids"), first["id"])
    # A party naming its own thread goes in, batched as sent.
    assert bus.send_many([ok])[0]["thread"] == thread


def test_the_answer_json_is_encoded_once_per_receiver_whatever_the_threads(two: Bus) -> None:
    from bus.services import send_many

    send_many._answer_parts.cache_clear()
    items = [
        {"id": f"t-{i}", "from": f"neo:lane{i}", "to_id": f"s{i % 2 + 1}", "text": "hi"}
        for i in range(12)
    ]
    answers = two.send_many(items)
    assert len({a["thread"] for a in answers}) == 12  # a thread per sender and receiver
    assert send_many._answer_parts.cache_info().misses == 2  # s1's and s2's standing
    # What the batch answered is what its id's resend answers (the JSON in ids, restored).
    for a in answers:
        sid = a["recipient"]["session"]
        held = two.store.r.hget(two.store.k.s(sid, "ids"), a["id"])
        kept = {**packing.restore(held, sid, a["id"]), "durable": "memory"}  # the call's own
        kept["recipient"]["host_state"] = "unseen"  # read per call: no worker ever beat here
        assert json.dumps(kept) == json.dumps(a)


def test_a_receivers_record_changed_since_the_last_batch_answers_as_it_is_now(
    two: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The appends assume each receiver's record as last read (bus.services.send_many._RECORDS) and
    # append_many.lua checks it: one that changed, or a session gone, writes nothing in
    # the first round trip and is written (or bounced) from the record as it is now.
    store, rounds = two.store, []
    real = store.execute_loaded

    def counted(pipe: Any) -> list[Any]:
        rounds.append(1)
        return real(pipe)

    monkeypatch.setattr(store, "execute_loaded", counted)

    def items(tag: str) -> list[dict[str, Any]]:
        return [
            {"id": f"{tag}-{i}", "from": "neo:lane0", "to_id": f"s{i % 2 + 1}", "text": "hi"}
            for i in range(4)
        ]

    def recipients(answers: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [a["recipient"] for a in answers]

    two.send_many(items("a"))
    rounds.clear()
    same = two.send_many(items("b"))
    assert len(rounds) == 1  # the records as read: no round trip more
    two.turn("s1", "start")
    store.r.hset(store.k.s("s2", "session"), "last_seen", str(now_ms() - 5))
    rounds.clear()
    changed = two.send_many(items("c"))
    assert len(rounds) == 2
    singles = [two.send(m) for m in items("d")]
    assert recipients(changed) == recipients(singles) != recipients(same)
    assert changed[1]["recipient"]["last_seen"] == int(
        store.r.hget(store.k.s("s2", "session"), "last_seen")
    )
    assert [a["state"] for a in changed] == ["stored"] * 4
    assert all(a["duplicate"] for a in two.send_many(items("c")))
    store.r.delete(store.k.s("s2", "session"))  # gone: its messages bounce, as a send's
    gone = two.send_many(items("e"))
    assert [a["state"] for a in gone] == ["stored", "bounced"] * 2
    assert without_id(gone[1]) == without_id(two.send(items("f")[1]))
    assert received(two, "s2").count("e-1") == 0
    assert sum(1 for i in received(two, "s1") if i.startswith("c-")) == 2
