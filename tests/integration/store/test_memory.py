"""What an idle session keeps in Redis: counts, not timings.

An idle session here is one that was registered and had one message delivered and noticed
(bench/swarm.py's memory row)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import pytest
import redis

from bus.api import Bus
from bus.core.clock import ManualClock
from bus.core.errors import Refused
from bus.core.models import now_ms
from bus.store import compaction
from bus.store.compaction import MAX_ENTRIES, compact_all
from tests.support.waiting import wait_for


def send(b: Bus, to: str, text: str) -> dict[str, Any]:
    return b.send({"from": "ha:lane", "to_id": to, "text": text, "class": "action"})


def test_a_delivered_queue_goes_with_its_cursor_and_the_next_message_is_delivered(
    bus: Bus,
) -> None:
    bus.open_session("coord")
    bus.turn("coord", "start")
    first = send(bus, "coord", "hello")
    store, key, cursor_key = (
        bus.store,
        bus.store.k.s("coord", "stream"),
        bus.store.k.s("coord", "cursor"),
    )
    bus.deliver_session("coord")
    bus.drain("coord")
    # The delivery took the whole queue: it goes, cursor and all (once the server's clock
    # is past the cursor's ms; a later trim, as the compaction pass's, finishes it).
    wait_for(
        lambda: (
            store.queue.set_trim_floor("coord", bus.settings.stream_keep) is None
            and store.r.exists(key, cursor_key) == 0
        ),
        what="the queue and its cursor dropped",
    )
    assert store.queue.backlog("coord") == 0 and store.queue.cursor("coord") == "0-0"
    # The message lives on in the inbox, the top row still dates the last arrival.
    [rec] = store.inbox.records("coord", [first["id"]])
    assert rec["mark"] == "noticed"
    row = next(r for r in bus.watch.top_rows() if r["session"] == "coord")
    assert row["last_at"] == rec["at"] > 0

    second = send(bus, "coord", "again")
    assert store.queue.backlog("coord") == 1
    assert [f["id"] for _e, f in store.queue.read_after("coord", "0-0")] == [second["id"]]
    # A resend of the first (its entry gone) is still answered from the ids, not stored.
    again = bus.send({"from": "ha:lane", "to_id": "coord", "text": "hello", "id": first["id"]})
    assert again["id"] == first["id"] and store.queue.backlog("coord") == 1
    # A trim now (as after a delivery that raced this send) keeps the entry not yet taken.
    store.queue.set_trim_floor("coord", bus.settings.stream_keep)
    assert [f["id"] for _e, f in store.queue.read_after("coord", "0-0")] == [second["id"]]
    bus.deliver_session("coord")
    assert store.queue.backlog("coord") == 0
    assert [r["m"]["id"] for r in store.inbox.records("coord", [second["id"]])] == [second["id"]]


def test_a_queue_taken_within_its_cursors_millisecond_keeps_its_last_id(bus: Bus) -> None:
    # The server's clock not past the cursor's ms (here: a cursor a minute ahead): the
    # entries go but the stream stays, so the next entry still sorts after the cursor.
    store, key = bus.store, bus.store.k.s("q", "stream")
    bus.open_session("q")
    ahead = f"{store.server_time_ms() + 60_000}-0"
    store.r.xadd(key, {"id": "m1", "m": "{}"}, id=ahead)
    store.queue.advance("q", ahead)
    store.queue.set_trim_floor("q", bus.settings.stream_keep)
    assert store.r.xlen(key) == 0 and store.r.exists(key) == 1 and store.queue.cursor("q") == ahead
    store.r.xadd(key, {"id": "m2", "m": "{}"})
    assert [f["id"] for _e, f in store.queue.read_after("q", store.queue.cursor("q"))] == ["m2"]


def test_a_message_withdrawn_before_its_delivery_stays_withdrawn_once_the_queue_is_empty(
    bus: Bus,
) -> None:
    bus.open_session("me")
    bus.open_session("lane")
    sent = bus.send({"from": "hosta:me", "from_session": "me", "to_id": "lane", "text": "oops"})
    assert bus.withdraw(sent["id"], by="me")["state"] == "unsent"
    bus.deliver_session("lane")  # skips it, then empties the queue
    assert bus.store.r.xlen(bus.store.k.s("lane", "stream")) == 0
    with pytest.raises(Refused):
        bus.withdraw(sent["id"], by="someone-else")
    assert bus.withdraw(sent["id"], by="me")["state"] == "withdrawn"


def test_the_compaction_pass_shrinks_short_streams_and_keeps_what_they_hold(bus: Bus) -> None:
    store, k = bus.store, bus.store.k
    bus.open_session("coord")
    bus.turn("coord", "start")
    sent = [send(bus, "coord", "hello"), send(bus, "coord", "hi")]  # a log: two messages
    bus.deliver_session("coord")
    bus.drain("coord")
    [thread] = store.inbox.threads_of("coord")
    streams = [k.s("coord", "events"), k.t(thread, "log")]
    # A long stream is left alone: its DUMP would cost its size.
    long_key = k.s("other", "events")
    for i in range(MAX_ENTRIES + 1):
        store.r.xadd(long_key, {"kind": "x", "n": str(i)})

    def snapshot(key: str) -> tuple[Any, ...]:
        info = store.r.xinfo_stream(key)
        return (store.r.xrange(key), info["last-generated-id"], info.get("entries-added"))

    before = {key: snapshot(key) for key in [*streams, long_key]}
    usage = {key: store.r.memory_usage(key, samples=0) for key in [*streams, long_key]}
    nodes_before = {key: int(store.r.xinfo_stream(key)["radix-tree-keys"]) for key in streams}
    saved = compact_all(store, force=True)
    # On Redis 7 at the default stream-node-max-bytes (4096) each short stream held a
    # ~4.7 KB node: the pass saves it. A server that sizes nodes to their entries (Valkey
    # 9) leaves nothing to save: then each was compact already (the bound below).
    assert saved > 0 or all(
        usage[key] <= 2048 + 1024 * (nodes_before[key] - 1) for key in streams
    ), usage
    for key in streams:
        assert snapshot(key) == before[key]  # the same entries, last id, count
        # Compact: about its entries' bytes plus the stream's fixed cost, not a whole node
        # (the scheduler may have set a smaller stream-node-max-bytes: then a short stream
        # spans a few nodes, each compact).
        nodes = int(store.r.xinfo_stream(key)["radix-tree-keys"])
        assert store.r.memory_usage(key, samples=0) <= 2048 + 1024 * (nodes - 1), key
    assert snapshot(long_key) == before[long_key]
    assert store.r.memory_usage(long_key, samples=0) == usage[long_key]
    # Already compact: a second pass leaves everything as it is.
    assert compact_all(store, force=True) == 0
    # The streams go on: a new record after the compacted ones.
    second = send(bus, "coord", "again")
    bus.deliver_session("coord")
    assert [f.get("id") for _e, f in store.r.xrange(k.t(thread, "log"))][-2:] == [
        sent[1]["id"],
        second["id"],
    ]


def test_a_reader_blocked_on_a_stream_gets_its_next_entry_across_a_compaction(bus: Bus) -> None:
    store, k = bus.store, bus.store.k
    bus.open_session("coord")
    store.events.record("coord", "probe", note="before")
    key = k.s("coord", "events")
    last = store.events.last_event_id("coord")
    name = f"blocked-{key}".replace(" ", "_")
    got: list[Any] = []
    assert bus.settings.redis_url
    reader = redis.Redis.from_url(
        bus.settings.redis_url, decode_responses=True, single_connection_client=True
    )

    def read() -> None:
        reader.client_setname(name)
        got.extend(reader.xread({key: last}, block=10_000) or [])

    t = threading.Thread(target=read)
    t.start()
    try:
        wait_for(
            lambda: any(
                c.get("name") == name and c.get("cmd") == "xread" for c in store.r.client_list()
            ),
            what="the reader blocked",
        )
        saved = compact_all(store, force=True)
        store.events.record("coord", "probe", note="after")
        t.join(15)
    finally:
        t.join(15)
        reader.close()
    assert not t.is_alive()
    [(_key, [(_eid, fields)])] = got
    assert fields["note"] == "after"
    # It was rewritten (a one-record stream on a default server holds a 4 KB node).
    assert saved > 0 or store.r.config_get("stream-node-max-bytes") != {
        "stream-node-max-bytes": "4096"
    }


def test_a_compaction_pass_goes_a_chunk_of_sessions_a_tick(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compaction, "CHUNK", 1)
    monkeypatch.setattr(compaction, "BUDGET_S", 0.0)  # one chunk a tick
    monkeypatch.setattr(compaction, "GAP_S", 0.0)  # and the ticks back to back
    monkeypatch.setattr(compaction, "SETTLED_MS", 0)  # the streams just written count
    store = bus.store
    for sid in ("a1", "a2"):
        bus.open_session(sid)
        store.events.record(sid, "probe", note="x")
    usage = lambda sid: store.r.memory_usage(store.k.s(sid, "events"), samples=0)  # noqa: E731
    big = {sid: usage(sid) for sid in ("a1", "a2")}
    first = compact_all(store)  # claims the pass, does one session
    if max(big.values()) > 2048:  # a default server: each one-record stream held 4 KB
        assert [usage(sid) < big[sid] for sid in ("a1", "a2")] in ([True, False], [False, True])
        assert first > 0
    compact_all(store)  # the rest of the pass, without a new claim
    assert all(usage(sid) <= 2048 for sid in ("a1", "a2"))
    store.events.record("a1", "probe", note="y")
    assert compact_all(store) == 0  # the next pass waits for its minute


def test_a_one_message_thread_keeps_its_message_in_its_record_until_a_second(bus: Bus) -> None:
    store, k = bus.store, bus.store.k
    bus.open_session("coord")
    bus.open_session("lane")
    bus.turn("coord", "start")
    sent = bus.send({"from": "ha:lane", "from_session": "lane", "to_id": "coord", "text": "hello"})
    bus.deliver_session("coord")
    bus.deliver_session("coord")  # a redone delivery appends nothing twice
    [thread] = store.inbox.threads_of("coord")
    # No log and no seen set for one message: it is in the thread's record.
    assert store.r.exists(k.t(thread, "log"), k.t(thread, "seen")) == 0
    # Kept compact: no field at its usual value; the history reads it whole, as the
    # recipient's record has it.
    one = json.loads(store.r.hget(k.t(thread, "meta"), "one_m"))
    assert one["id"] == sent["id"] and "urgency" not in one and "v" not in one
    [record] = store.inbox.all_records("coord")
    [entry] = store.inbox.thread_log(thread)
    assert entry["id"] == sent["id"] and json.loads(entry["m"]) == record["m"]
    history = bus.read("coord", thread)["messages"]
    assert [(m["id"], m["text"]) for m in history] == [(sent["id"], "hello")]
    assert int(store.inbox.thread_field(thread, "count") or 0) == 1
    # A reply makes the log: the first message, then the reply, in order, each once.
    reply = bus.reply("coord", thread, "hi back")
    bus.deliver_session("lane")
    bus.deliver_session("coord")
    ids = [f["id"] for _e, f in store.r.xrange(k.t(thread, "log"))]
    assert ids[0] == sent["id"] and len(ids) == len(set(ids)) == 2
    assert store.r.hget(k.t(thread, "meta"), "one_m") is None
    assert json.loads(store.inbox.thread_log(thread)[0]["m"]) == record["m"]
    assert [m["text"] for m in bus.read("coord", thread)["messages"]] == ["hello", "hi back"]
    assert reply["ok"] is True


def clients_of(store: Any, key: str) -> list[dict[str, Any]]:
    """``CLIENT LIST`` of the server holding ``key`` (on a cluster, the node of its slot)."""
    if store.cluster:
        return list(store.r.client_list(target_nodes=store.r.get_node_from_key(key)))
    return list(store.r.client_list())


def test_a_quiet_sessions_events_are_dropped_and_a_waited_receipt_still_ends(bus: Bus) -> None:
    store, k = bus.store, bus.store.k
    bus.open_session("me")
    bus.open_session("coord")
    bus.turn("coord", "start")
    sent = bus.send({"from": "ha:me", "from_session": "me", "to_id": "coord", "text": "hello"})
    key = k.s("coord", "events")
    # Not quiet for long: kept, by the pass too.
    assert store.events.drop_quiet_events(["coord"], compaction.QUIET_MS) == 0
    compact_all(store, force=True)
    assert store.r.exists(key) == 1
    got: list[dict[str, Any]] = []
    waiter = threading.Thread(
        target=lambda: got.append(bus.receipt(sent["id"], by="me", wait_for="noticed", timeout=30))
    )
    waiter.start()
    try:
        wait_for(
            lambda: any(
                c.get("name") == f"inbox-wait:{sent['id']}" and c.get("cmd") == "xread"
                for c in clients_of(store, key)
            ),
            what="the waiter blocked",
        )
        # Quiet (a cutoff of 0 ms): dropped under the blocked reader.
        wait_for(lambda: store.events.drop_quiet_events(["coord"], 0) > 0, what="events dropped")
        assert store.r.exists(key) == 0 and store.events.last_event_id("coord") == "0-0"
        bus.deliver_session("coord")
        bus.drain("coord")
        waiter.join(30)
    finally:
        waiter.join(30)
    assert not waiter.is_alive()
    assert got[0]["state"] == "noticed", got
    assert store.r.exists(key) == 1  # made again by the next record


def test_a_handles_sessions_are_a_small_hash(bus: Bus) -> None:
    store, k = bus.store, bus.store.k
    bus.open_session("h1", handle="ha:one")
    bus.close_session("h1")
    bus.open_session("h0", handle="ha:one")
    assert store.r.type(k.handle_map("ha:one")) == "hash"
    assert not list(store.r.scan_iter(match=f"{k.prefix}:{{h:*}}:sids"))  # no set of them
    assert [s.session for s in store.sessions.sessions_by_handle("ha:one")] == ["h0", "h1"]


def test_a_default_handle_keeps_no_hash_and_still_finds_its_session(bus: Bus) -> None:
    store, k = bus.store, bus.store.k
    host = bus.settings.host
    bus.open_session("d1")  # its handle is <host>:d1
    assert bus.session("d1").handle == f"{host}:d1"
    assert store.r.exists(k.handle_map(f"{host}:d1")) == 0
    assert bus.resolve(f"{host}:d1").session == "d1"
    # The default handle is held as any other: another session cannot take it while d1
    # is live, and may once d1 is closed (both then carry it).
    with pytest.raises(Refused) as taken:
        bus.open_session("d2", handle=f"{host}:d1")
    assert taken.value.code == "handle_taken"
    bus.close_session("d1")
    bus.open_session("d2", handle=f"{host}:d1")
    assert [s.session for s in store.sessions.sessions_by_handle(f"{host}:d1")] == ["d1", "d2"]
    assert bus.resolve(f"{host}:d1").session == "d2"
    # A session moved to another host no longer carries the default handle it had.
    bus.open_session("d1", handle="elsewhere:d1")
    assert [s.session for s in store.sessions.sessions_by_handle(f"{host}:d1")] == ["d2"]
    assert store.sessions.sessions_by_handle("nohost:nobody") == []


def test_a_send_answers_age_is_kept_in_the_threads_zset_not_a_key_of_its_own(
    bus: Bus,
) -> None:
    store, k = bus.store, bus.store.k
    bus.open_session("coord")
    bus.turn("coord", "start")
    one = send(bus, "coord", "one")
    [many] = bus.send_many([{"from": "ha:b", "to_id": "coord", "text": "two"}])
    threads = k.s("coord", "threads")
    assert store.r.exists(k.s("coord", "idsage")) == 0
    # Before the delivery: only the ages (negative scores), no thread listed yet.
    ages = dict(store.r.zrange(threads, 0, -1, withscores=True))
    assert set(ages) == {f"#{one['id']}", f"#{many['id']}"} and max(ages.values()) < 0
    assert store.inbox.threads_of("coord") == []
    bus.deliver_session("coord")
    listed = store.inbox.threads_of("coord")
    assert len(listed) == 2 and all(t.startswith("thr_") for t in listed)
    streams = [k.s("coord", "events"), *(k.t(t, "log") for t in listed)]
    assert sorted(store.events.session_streams(["coord"])) == sorted(streams)
    # An answer past its 7 days goes with its age and its receipt (unstamped since it was
    # stored, long ago too); the threads and the other answer stay.
    store.r.zadd(threads, {f"#{one['id']}": -1})
    store.r.hset(k.s("coord", "ids"), f"~{one['id']}", json.dumps({"from": "ha:lane", "stored": 1}))
    bus.inbox.prune("coord")
    assert store.queue.first_answer("coord", one["id"]) is None
    assert store.r.hexists(k.s("coord", "ids"), f"~{one['id']}") == 0
    # Kept as answered, without what each call answers of its own (durable, host_state).
    kept = {k_: v for k_, v in many.items() if k_ != "durable"}
    kept["recipient"] = {k_: v for k_, v in many["recipient"].items() if k_ != "host_state"}
    assert store.queue.first_answer("coord", many["id"]) == kept
    assert store.inbox.threads_of("coord") == listed
    assert f"#{one['id']}" not in dict(store.r.zrange(threads, 0, -1, withscores=True))
    again = bus.send({"id": one["id"], "from": "ha:lane", "to_id": "coord", "text": "one"})
    assert again["duplicate"] is False


def test_a_receipt_is_kept_beside_its_answer_without_what_they_share_and_still_moves(
    bus: Bus,
) -> None:
    store, k = bus.store, bus.store.k
    bus.open_session("coord")
    bus.open_session("lane")
    bus.turn("coord", "start")
    one = bus.send({"from": "ha:lane", "from_session": "lane", "to_id": "coord", "text": "a"})
    [many] = bus.send_many([{"from": "ha:lane", "from_session": "lane", "to_id": "coord",
                             "text": "b"}])  # fmt: skip
    for sent in (one, many):
        # In ids, no key of its own: no id, recipient nor thread (the answer's beside it).
        assert store.r.exists(k.receipt("coord", sent["id"])) == 0
        fields = json.loads(store.r.hget(k.s("coord", "ids"), f"~{sent['id']}"))
        assert set(fields) == {"from", "from_session", "stored"}
    bus.deliver_session("coord")
    bus.drain("coord")
    for thread in store.inbox.threads_of("coord"):
        bus.read("coord", thread, mark_read=True)  # receipt_mark.lua stamps "read"
    # The 'receipt' record (what `receipt --wait-for` wakes on) names the ids moved.
    moved = [
        mid
        for _e, f in store.r.xrange(k.s("coord", "events"))
        if f.get("kind") == "receipt" and f.get("state") == "read"
        for mid in json.loads(f["ids"])
    ]
    assert sorted(moved) == sorted([one["id"], many["id"]])
    for sent in (one, many):
        assert "read" in json.loads(store.r.hget(k.s("coord", "ids"), f"~{sent['id']}"))
        got = bus.receipt(sent["id"], by="lane")
        assert (got["state"], got["to"], got["id"]) == ("read", "coord", sent["id"])
        assert got["thread"] == sent["thread"]


def test_a_threads_record_keeps_no_label_its_key_gives_no_usual_class_and_no_created(
    bus: Bus,
) -> None:
    store, k = bus.store, bus.store.k
    bus.open_session("coord")
    bus.turn("coord", "start")
    send(bus, "coord", "plain")
    bus.send({"from": "ha:other", "to_id": "coord", "text": "stuck", "class": "blocker"})
    bus.deliver_session("coord")
    rows = {r["label"]: r for r in bus.threads("coord")["threads"]}
    assert set(rows) == {"ha:lane", "ha:other"}  # the labels, from the keys
    assert (rows["ha:lane"]["class"], rows["ha:other"]["class"]) == ("action", "blocker")
    for row in rows.values():
        raw = store.r.hgetall(k.t(row["threadId"], "meta"))
        assert not {"label", "created"} & set(raw)
        assert raw.get("class") == (None if row["label"] == "ha:lane" else "blocker")
        assert store.inbox.thread_meta(row["threadId"])["label"] == row["label"]
        assert bus.read("coord", row["threadId"])["label"] == row["label"]
    # A later action after a blocker takes the thread back to the usual class.
    bus.send({"from": "ha:other", "to_id": "coord", "text": "unstuck", "class": "action"})
    bus.deliver_session("coord")
    [other] = [t for t in rows.values() if t["label"] == "ha:other"]
    assert store.r.hget(k.t(other["threadId"], "meta"), "class") is None


NEWEST = ("newest_at", "newest_preview")


def _thread_row(b: Bus, sid: str, thread: str) -> tuple[int, str]:
    [row] = [r for r in b.threads(sid)["threads"] if r["threadId"] == thread]
    return row["newestAt"], row["newestPreview"]


@pytest.fixture
def clock() -> ManualClock:
    """The bus's clock: a sent message is stored with its time (the server's, never the
    sender's ts), so a test sets it per send, near the wall clock."""
    return ManualClock(now_ms())


@pytest.fixture
def clocked(make_bus: Callable[..., Bus], clock: ManualClock) -> Bus:
    return make_bus(clock=clock)


def send_at(b: Bus, clock: ManualClock, at: int, text: str) -> dict[str, Any]:
    """Send ``coord`` ``text`` from ha:lane at the bus's time ``at`` (the sender's own ts,
    1, ignored)."""
    clock.set(at)
    return b.send({"from": "ha:lane", "to_id": "coord", "text": text, "ts": 1})


def _coord_thread(b: Bus, clock: ManualClock, *sends: tuple[str, int]) -> str:
    """A running session ``coord`` sent each ``(text, at)`` from one sender and delivered:
    the one thread they make."""
    b.open_session("coord")
    b.turn("coord", "start")
    for text, at in sends:
        send_at(b, clock, at, text)
    b.deliver_session("coord")
    [thread] = b.store.inbox.threads_of("coord")
    return thread


@pytest.mark.parametrize("text", ["hello", "café ☕ \U0001f600 done"])
def test_a_one_message_threads_newest_is_its_messages_and_written_back_when_it_moves(
    clocked: Bus, clock: ManualClock, text: str
) -> None:
    bus, t = clocked, clock.ms
    store, k = bus.store, bus.store.k
    bus.open_session("coord")
    bus.turn("coord", "start")
    sent = send_at(bus, clock, t + 5_000, text)
    bus.deliver_session("coord")
    [thread] = store.inbox.threads_of("coord")
    meta = k.t(thread, "meta")
    # Not stored: its message's ts and text; every reader restores them.
    assert store.r.hmget(meta, list(NEWEST)) == [None, None]
    assert (
        store.inbox.thread_meta(thread)["newest_at"],
        store.inbox.thread_meta(thread)["newest_preview"],
    ) == (str(t + 5_000), text)
    assert store.inbox.thread_metas([thread])[0]["newest_preview"] == text
    assert _thread_row(bus, "coord", thread) == (t + 5_000, text)
    # A second message older than the first: the first stays the newest, written back
    # (from one_m) when it moves to the log.
    send_at(bus, clock, t + 4_000, "older")  # another host's clock, a second behind
    bus.deliver_session("coord")
    assert store.r.hget(meta, "one_m") is None
    assert store.r.hmget(meta, list(NEWEST)) == [str(t + 5_000), text]
    assert _thread_row(bus, "coord", thread) == (t + 5_000, text)
    assert int(store.inbox.thread_field(thread, "count") or 0) == 2
    assert sent["ok"] is True


def test_a_one_message_threads_newest_is_stored_when_its_message_does_not_give_it(
    clocked: Bus, clock: ManualClock
) -> None:
    bus, t = clocked, clock.ms
    store, k = bus.store, bus.store.k
    # Its preview is its text's first line, not its text.
    thread = _coord_thread(bus, clock, ("first\nsecond", t + 7_000))
    assert store.r.hmget(k.t(thread, "meta"), list(NEWEST)) == [str(t + 7_000), "first"]
    assert _thread_row(bus, "coord", thread) == (t + 7_000, "first")


def test_a_one_message_thread_written_with_its_newest_reads_it_and_a_newer_one_wins(
    clocked: Bus, clock: ManualClock
) -> None:
    # newest_* stored beside one_m (as when the message does not give them).
    bus, t = clocked, clock.ms
    store, k = bus.store, bus.store.k
    thread = _coord_thread(bus, clock, ("hello", t + 5_000))
    meta = k.t(thread, "meta")
    store.r.hset(meta, mapping={"newest_at": str(t + 6_000), "newest_preview": "as stored"})
    assert _thread_row(bus, "coord", thread) == (t + 6_000, "as stored")
    send_at(bus, clock, t + 9_000, "newer")
    bus.deliver_session("coord")
    assert store.r.hmget(meta, list(NEWEST)) == [str(t + 9_000), "newer"]
    assert _thread_row(bus, "coord", thread) == (t + 9_000, "newer")


def test_a_threads_two_messages_in_one_delivery_keep_the_newests_as_stored(
    clocked: Bus, clock: ManualClock
) -> None:
    # One thread_append call takes both: the first is one_m for a moment, then moves.
    bus, t = clocked, clock.ms
    store, k = bus.store, bus.store.k
    thread = _coord_thread(bus, clock, ("later", t + 8_000), ("earlier", t + 3_000))
    assert store.r.hmget(k.t(thread, "meta"), list(NEWEST)) == [str(t + 8_000), "later"]
    assert [json.loads(e["m"])["text"] for e in store.inbox.thread_log(thread)] == [
        "later",
        "earlier",
    ]


@pytest.mark.parametrize("age_days", [0, 30])
def test_a_records_arrival_left_to_its_ts_is_read_by_the_floors_scripts(
    clocked: Bus, clock: ManualClock, age_days: int
) -> None:
    # A record keeps no "at" when it is its message's ts (bus.store.packing.keep_record): the
    # expiry (expire.lua) and the floor's sweep (floor_sweep.lua) read the ts instead.
    bus = clocked
    store, k = bus.store, bus.store.k
    ts = now_ms() - age_days * 86_400_000
    bus.open_session("coord")
    bus.turn("coord", "start")
    sent = send_at(bus, clock, ts, "hi")
    bus.deliver_session("coord")  # its notice on the floor, the message still new
    assert "at" not in json.loads(store.r.hget(k.s("coord", "msgs"), sent["id"]))
    assert store.inbox.records("coord", [sent["id"]])[0]["at"] == ts
    expired = bus.receipts.expire("coord")  # the floor's messages: by their arrival
    assert expired == ([sent["id"]] if age_days else [])
    if age_days:
        return
    # A notice gone from the floor unconfirmed, its record with no score for it: given
    # back at its message's arrival.
    bus.floor.drain("coord")  # taken by a drainer that died before recording it
    [nid] = store.r.hkeys(k.s("coord", "floor"))
    store.r.hset(
        k.s("coord", "floor"),
        nid,
        json.dumps({"ids": [sent["id"]], "new": [], "wake": [], "gone": 1}),
    )
    store.r.zrem(k.s("coord", "new"), sent["id"])
    assert bus.inbox.sweep_floor("coord", now=now_ms(), nids=[nid]) == 1
    assert store.r.zscore(k.s("coord", "new"), sent["id"]) == ts


def test_a_compaction_tick_goes_on_to_the_next_chunk_only_within_its_budget(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A pass of hundreds of sessions in one tick held the tick (and the wakes due
    # meanwhile) for ~300 ms: chunks go on only while the tick's budget lasts.
    monkeypatch.setattr(compaction, "CHUNK", 1)
    store = bus.store
    for sid in ("b1", "b2", "b3"):
        bus.open_session(sid)
    seen: list[list[str]] = []
    real = compaction.compact_sessions
    monkeypatch.setattr(
        compaction,
        "compact_sessions",
        lambda st, sids, *a: (seen.append(sids), real(st, sids, *a))[1],
    )
    monkeypatch.setattr(compaction, "BUDGET_S", 3600.0)
    compact_all(store)  # within the budget: the whole pass in one tick
    assert sorted(s for chunk in seen for s in chunk) == ["b1", "b2", "b3"]
    assert all(len(chunk) == 1 for chunk in seen)


def test_a_compaction_pass_waits_its_gap_between_ticks(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The scheduler ticks every few ms while wakes fall due: the pass takes a chunk at
    # most every GAP_S, not one a tick.
    monkeypatch.setattr(compaction, "CHUNK", 1)
    monkeypatch.setattr(compaction, "BUDGET_S", 0.0)
    monkeypatch.setattr(compaction, "GAP_S", 3600.0)
    for sid in ("g1", "g2"):
        bus.open_session(sid)
    seen: list[list[str]] = []
    real = compaction.compact_sessions
    monkeypatch.setattr(
        compaction,
        "compact_sessions",
        lambda st, sids, *a: (seen.append(sids), real(st, sids, *a))[1],
    )
    compact_all(bus.store)
    compact_all(bus.store)  # the next tick, within the gap: nothing
    assert len(seen) == 1
    monkeypatch.setattr(compaction, "_next", {})  # the gap over
    compact_all(bus.store)
    assert sorted(s for chunk in seen for s in chunk) == ["g1", "g2"]


def test_the_pass_leaves_a_stream_written_moments_ago(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Compacted while still written, a stream takes a fresh node at its next entry and
    # is compacted again at every pass: the pass waits until it settled.
    store = bus.store
    bus.open_session("w1")
    store.events.record("w1", "probe", note="x")
    key = store.k.s("w1", "events")
    big = store.r.memory_usage(key, samples=0)
    if big <= 2048:
        pytest.skip("this server's stream nodes are already small")
    args = (compaction.MAX_ENTRIES, compaction.SLACK_BYTES, compaction.NODE_BYTES)
    assert store.events.compact_streams([key], *args, 60_000) == 0  # written within the minute
    assert store.r.memory_usage(key, samples=0) == big
    monkeypatch.setattr(compaction, "SETTLED_MS", 60_000)
    compact_all(store)  # the scheduled pass leaves it too
    assert store.r.memory_usage(key, samples=0) == big
    assert store.events.compact_streams([key], *args, 0) > 0  # settled (here: no wait asked)
