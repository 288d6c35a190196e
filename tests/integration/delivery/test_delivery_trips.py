"""A delivery kick in few round trips (bus.store.delivery): what each grouped step does,
and a count (not a timing) of the round trips one kick makes."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from bus.api import Bus
from bus.delivery.lease import Lease
from bus.store import packing
from bus.store.delivery import taken_records
from bus.store.store import Store
from bus.surfaces.harness.listener import Listener
from tests.support.listeners import collect
from tests.support.trips import RoundTrips, standalone


def test_a_kick_with_one_message_makes_few_round_trips_and_no_script_exists(
    bus: Bus, trips: RoundTrips
) -> None:
    standalone(bus)
    bus.open_session("s")
    bus.turn("s", "start")
    got: list[dict[str, Any]] = []
    listener = Listener.for_session(bus.floor, "s", collect(got)).start()
    try:
        bus.send({"id": "warm", "from": "hosta:me", "to_id": "s", "text": "warm"})
        bus.deliver_session("s")  # connections open, scripts loaded
        sent = bus.send({"id": "one", "from": "hosta:me", "to_id": "s", "text": "hi"})
        trips.count, trips.commands = 0, []
        report = bus.deliver_session("s")
        kick, commands = trips.count, list(trips.commands)
        trips.count = 0
        empty = bus.deliver_session("s")
        empty_kick = trips.count
    finally:
        listener.stop()
    assert report.inbox == 1 and [n["messages"] for n in report.notices] == [1]
    assert got[-1]["notice"]["messages"] == [sent["id"]]
    assert empty.inbox == 0 and not empty.notices
    # Before: 31 round trips for this kick and 13 for an empty one. Now: begin, sender
    # lookup, ingest with the snapshot (the cursor move, the next entries, the trim
    # check's length and, the reads showing a steer, the notice taken with its
    # records), confirm (with the retry field, the unlock and the hand-off flag), the
    # counters.
    assert kick <= 6, commands
    assert empty_kick <= 3
    assert "SCRIPT EXISTS" not in commands


def test_a_pipeline_runs_a_script_the_server_never_saw_without_script_exists(
    bus: Bus, trips: RoundTrips
) -> None:
    store = standalone(bus).store
    # A script body no server has cached (a fresh comment), as after a restart.
    script = bus.store.r.register_script(f"-- {store.k.prefix}\nreturn ARGV[1] .. KEYS[1]")
    key = store.k.s("p", "k")
    store.ping()  # the connection open
    for transaction in (False, True):
        trips.count, trips.commands = 0, []
        pipe = store.pipeline(transaction=transaction)
        pipe.set(store.k.s("p", "x"), "1")
        script(keys=[key], args=["v"], client=pipe)
        pipe.get(store.k.s("p", "x"))
        assert pipe.execute() == [True, f"v{key}", "1"]  # only the replies queued
        assert trips.count == 1 and "SCRIPT EXISTS" not in trips.commands


def test_begin_delivery_takes_the_lock_clears_the_flag_and_reads_the_start(bus: Bus) -> None:
    store = bus.store
    k = store.k
    bus.open_session("s")
    assert store.queue.mark_pending("s")
    a = bus.send({"id": "a", "from": "hosta:me", "to_id": "s", "text": "a"})
    bus.send({"id": "b", "from": "hosta:me", "to_id": "s", "text": "b"})
    # b's answer gone (pruned): its entry still comes, with no answer.
    store.r.hdel(k.s("s", "ids"), "b")
    start = store.delivery.begin_delivery("s", 200)
    assert start is not None and store.r.get(k.s("s", "lock")) == start.token
    assert not store.r.exists(k.s("s", "pending"))
    assert start.rawflight is None and start.cursor == "0-0"
    assert start.rows is not None
    assert [f["id"] for _eid, f in start.rows] == ["a", "b"]
    assert [json.loads(f["m"])["text"] for _eid, f in start.rows] == ["a", "b"]
    assert start.rows == store.queue.read_after("s", "0-0", 200)
    assert start.info == store.sessions.get_session("s")
    # Kept compact (bus/store/packing.py): the delivery reads its state; restored whole, the answer.
    assert start.answers[0] is not None and start.answers[0]["state"] == "stored"
    restored = packing.restore(json.dumps(start.answers[0]), "s", "a")
    # Kept without what the send answered of its own call (durable, host_state).
    kept = {f: v for f, v in a.items() if f != "durable"}
    kept["recipient"] = {f: v for f, v in a["recipient"].items() if f != "host_state"}
    assert restored == store.queue.first_answer("s", "a") == kept
    assert start.answers[1] is None
    # Held: nothing is touched, the flag stays.
    assert store.queue.mark_pending("s")
    assert store.delivery.begin_delivery("s", 200) is None
    assert store.r.exists(k.s("s", "pending"))
    store.delivery.unlock("s", start.token)


@pytest.mark.parametrize(
    ("queued", "count", "cursor_at", "flight", "rows", "info"),
    [
        (0, 200, None, False, 0, False),  # nothing queued: no record read
        (3, 200, None, False, 3, True),
        (3, 2, None, False, 2, True),  # up to count
        (3, 200, 1, False, 2, True),  # after the cursor
        (3, 200, 3, False, 0, False),  # all taken
        (3, 200, 1, True, None, False),  # a raw line in flight: nothing read
    ],
)
def test_begin_delivery_reads(
    make_bus: Callable[..., Bus],
    queued: int,
    count: int,
    cursor_at: int | None,
    flight: bool,
    rows: int | None,
    info: bool,
) -> None:
    b = make_bus()
    store: Store = b.store
    b.open_session("s")
    for i in range(queued):
        b.send({"id": f"m{i}", "from": "hosta:me", "to_id": "s", "text": str(i)})
    entries = store.queue.read_after("s", "0-0", 200)
    if cursor_at:
        store.queue.advance("s", entries[cursor_at - 1][0])
    if flight:
        store.queue.set_rawflight("s", entries[cursor_at or 0][0], f"m{cursor_at or 0}")
    start = store.delivery.begin_delivery("s", count)
    assert start is not None
    assert start.cursor == (entries[cursor_at - 1][0] if cursor_at else "0-0")
    assert (start.rawflight is not None) is flight
    if rows is None:
        assert start.rows is None
    else:
        assert start.rows is not None and len(start.rows) == rows
        assert [f["id"] for _e, f in start.rows] == [
            f"m{i}" for i in range((cursor_at or 0), (cursor_at or 0) + rows)
        ]
        assert len(start.answers) == rows
    assert (start.info is not None) is info
    store.delivery.unlock("s", start.token)


def test_the_snapshot_fences_and_moves_the_cursor(bus: Bus) -> None:
    store = bus.store
    bus.open_session("s")
    start = store.delivery.begin_delivery("s", 200)
    assert start is not None
    snap = store.delivery.delivery_snapshot("s", start.token, advance_to="5-0")
    assert snap.held and store.queue.cursor("s") == "5-0"
    assert snap.info == store.sessions.get_session("s") and snap.notice_id is None
    assert snap.floor_ids == [] and snap.view == store.inbox.inbox_view("s")
    store.r.set(store.k.s("s", "lock"), "another")
    assert not store.delivery.delivery_snapshot("s", start.token).held


def test_notice_take_with_the_msgs_key_returns_the_records_too(bus: Bus) -> None:
    store = bus.store
    k = store.k
    n = 2500  # past one HMGET chunk of 1,000 in the script
    pipe = store.r.pipeline(transaction=False)
    for i in range(n):
        pipe.zadd(k.s("s", "new"), {f"m{i}": i})
        if i != 7:  # one id with no record
            pipe.hset(k.s("s", "msgs"), f"m{i}", json.dumps({"id": f"m{i}"}))
    pipe.execute()
    keys = ("notice", "new", "wakeq", "events", "msgs")
    reply = store.run("notice_take", "s", keys, ["ntc-1", 1])
    ids, records = json.loads(reply)  # one JSON string, not a nested reply
    assert ids == [f"m{i}" for i in sorted(range(n), key=lambda i: i)]
    assert [json.loads(r)["id"] if r else None for r in records] == [
        None if i == 7 else f"m{i}" for i in range(n)
    ]
    assert [json.loads(r)["id"] for r in taken_records(reply)] == [
        f"m{i}" for i in range(n) if i != 7
    ]
    assert not store.run("notice_take", "s", keys, ["ntc-2", 2])  # one in flight


def test_a_fresh_fence_check_answers_from_the_last_confirmation(bus: Bus) -> None:
    store = bus.store
    calls: list[str] = []
    real = store.delivery.extend_lock

    def extend(sid: str, token: str) -> bool:
        calls.append(sid)
        return real(sid, token)

    store.delivery.extend_lock = extend  # type: ignore[method-assign]
    start = store.delivery.begin_delivery("f", 200)
    assert start is not None
    lease = Lease.adopt(store, "f", start.token, start.sent_at)
    try:
        assert lease.held(fresh=True) and calls == []  # just taken: no round trip
        assert lease.held() and calls == ["f"]  # a plain check always asks
        lease._confirmed_at -= 3600  # the last confirmation long ago
        assert lease.held(fresh=True) and calls == ["f", "f"]
        store.r.set(store.k.s("f", "lock"), "another")
        lease._confirmed_at -= 3600
        assert not lease.held(fresh=True) and lease.lost
        assert not lease.confirmed(True, start.sent_at)  # lost for good
    finally:
        lease.release()
    assert store.r.get(store.k.s("f", "lock")) == "another"


def test_release_takes_the_hand_off_flag_with_the_unlock(bus: Bus) -> None:
    store = bus.store
    start = store.delivery.begin_delivery("h", 200)
    assert start is not None
    lease = Lease.adopt(store, "h", start.token, start.sent_at)
    store.delivery.ask_again("h", 3000)
    assert lease.release(take_again=True) is True
    assert not store.r.exists(store.k.s("h", "lock"), store.k.s("h", "again"))
    again = Lease.acquire(store, "h")
    assert again is not None and again.release(take_again=True) is False


def test_a_debounced_wake_makes_few_round_trips(
    make_bus: Callable[..., Bus], trips: RoundTrips
) -> None:
    from bus.core.clock import ManualClock
    from bus.core.models import now_ms

    clock = ManualClock(now_ms())
    b = standalone(make_bus(clock=clock))
    b.open_session("w")
    b.turn("w", "start")
    b.turn("w", "end")
    b.send({"id": "blk", "from": "hosta:me", "to_id": "w", "text": "go", "class": "blocker"})
    assert not b.deliver_session("w").notices  # taken in; the wake waits for the debounce
    clock.advance(int(b.settings.wake_debounce_s * 1000) + 1000)
    trips.count, trips.commands = 0, []
    report = b.deliver_session("w")
    wake_trips, commands = trips.count, list(trips.commands)
    assert [n["wake"] for n in report.notices] == [True]
    assert b.session("w").state == "running"
    kinds = [f["kind"] for _e, f in b.store.r.xrange(b.store.k.s("w", "events"))]
    assert kinds[-2:] == ["notice_written", "wake"]
    # Before: 25. Now: begin, snapshot, notice_take, the notice's record with the state
    # and the wake record, unlock, the counters.
    assert wake_trips <= 6, commands


@pytest.mark.parametrize(
    ("heard", "running", "wake"),
    [(True, False, False), (False, False, False), (True, True, True), (False, True, True)],
)
def test_finish_notice(bus: Bus, heard: bool, running: bool, wake: bool) -> None:
    store = bus.store
    k = store.k
    bus.open_session("n")
    store.sessions.update_session("n", retry_at=5, state="idle")
    store.r.zadd(k.s("n", "new"), {"m1": 1})
    store.r.hset(k.s("n", "msgs"), "m1", json.dumps({"id": "m1", "mark": "new"}))
    assert store.run("notice_take", "n", ("notice", "new", "wakeq", "events"), ["ntc-1", 2])
    store.delivery.finish_notice(
        "n",
        "ntc-1",
        "socket" if heard else "file",
        3,
        heard=heard,
        running=running,
        wake={"notice": "ntc-1", "reason": "blocker"} if wake else None,
    )
    info = store.sessions.get_session("n")
    assert info is not None and info.state == ("running" if running else "idle")
    assert store.r.hget(k.s("n", "session"), "retry_at") is None
    mark = json.loads(store.r.hget(k.s("n", "msgs"), "m1"))["mark"]
    assert mark == ("noticed" if heard else "new")  # a file line waits for its drain
    assert store.inbox.notice_in_flight("n") is None
    assert store.inbox.floor_notice_ids("n") == ([] if heard else ["ntc-1"])
    events = [f for _e, f in store.r.xrange(k.s("n", "events"))]
    assert events[-1]["kind"] == (
        "wake" if wake else "inbox_noticed" if heard else "notice_written"
    )
    if wake:
        assert events[-1]["notice"] == "ntc-1" and events[-1]["reason"] == "blocker"


def test_the_snapshot_reads_the_entries_after_the_batch(bus: Bus) -> None:
    store = bus.store
    bus.open_session("r")
    for i in range(3):
        bus.send({"id": f"r{i}", "from": "hosta:me", "to_id": "r", "text": str(i)})
    entries = store.queue.read_after("r", "0-0", 200)
    start = store.delivery.begin_delivery("r", 200)
    assert start is not None
    snap = store.delivery.delivery_snapshot("r", start.token, read_after=entries[0][0], count=1)
    assert snap.rows == entries[1:2]
    snap = store.delivery.delivery_snapshot(
        "r", start.token, advance_to=entries[2][0], read_after=entries[2][0]
    )
    # Every entry taken: the cursor is the last one's, or gone with the emptied queue
    # (queue_trim.lua drops both once the server's clock is past its ms).
    assert snap.rows == [] and store.queue.cursor("r") in (entries[2][0], "0-0")
    assert (
        store.queue.backlog("r") == 0 and store.queue.read_after("r", store.queue.cursor("r")) == []
    )
    store.delivery.unlock("r", start.token)


def test_a_message_sent_while_a_batch_is_taken_in_goes_in_the_same_notice(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    bus.open_session("late")
    bus.turn("late", "start")
    got: list[dict[str, Any]] = []
    listener = Listener.for_session(bus.floor, "late", collect(got)).start()
    real = bus.inbox.ingest
    sent: list[str] = []

    def ingest_then_send(*args: Any, **kw: Any) -> None:
        real(*args, **kw)
        if not sent:  # arrives after the first read, before the plan
            sent.append(bus.send({"from": "hosta:me", "to_id": "late", "text": "late"})["id"])

    monkeypatch.setattr(bus.inbox, "ingest", ingest_then_send)
    try:
        first = bus.send({"from": "hosta:me", "to_id": "late", "text": "first"})
        report = bus.deliver_session("late")
    finally:
        listener.stop()
    assert report.inbox == 2 and len(report.notices) == 1
    assert got[-1]["notice"]["messages"] == [first["id"], sent[0]]
    assert bus.store.queue.backlog("late") == 0


def test_a_batch_of_a_senders_messages_is_two_script_calls_and_lands_in_order(
    bus: Bus, trips: RoundTrips
) -> None:
    # thread_append.lua and ingest.lua take many messages a call: a session's
    # 30 messages from two senders are one call per thread and one for the inbox, not two
    # calls a message, each message logged and taken once, in order.
    store = standalone(bus).store
    bus.open_session("s")
    bus.turn("s", "start")
    texts = [f"t{i}" for i in range(30)]
    bus.send_many(
        [
            {"id": f"m{i}", "from": f"hosta:p{i % 2}", "to_id": "s", "text": text}
            for i, text in enumerate(texts)
        ]
    )
    trips.count, trips.commands = 0, []
    report = bus.deliver_session("s")
    assert report.inbox == 30
    assert trips.commands.count("EVALSHA") + trips.commands.count("EVAL") < 12, trips.commands
    assert sorted(r["id"] for r in store.inbox.all_records("s")) == sorted(
        f"m{i}" for i in range(30)
    )
    threads = store.inbox.threads_of("s")
    assert len(threads) == 2
    for thread in threads:
        rows = store.inbox.thread_log(thread)
        got = [json.loads(r["m"])["text"] for r in rows]
        sender = json.loads(rows[0]["m"])["from"]
        assert got == [t for i, t in enumerate(texts) if f"hosta:p{i % 2}" == sender]
        assert int(store.inbox.thread_field(thread, "count") or 0) == 15
    bus.deliver_session("s")  # a redone delivery takes nothing twice
    assert len(store.inbox.all_records("s")) == 30


def test_a_start_asked_for_its_snapshot_brings_it_when_nothing_is_read(bus: Bus) -> None:
    # A due wake (its messages already in the inbox) starts and plans in one call.
    store = bus.store
    bus.open_session("idle")
    bus.open_session("sent")
    bus.send({"from": "hosta:me", "to_id": "sent", "text": "x"})
    idle, sent = store.delivery.begin_many(["idle", "sent"], 200, snapshot=True)
    assert idle is not None and sent is not None
    assert sent.rows and sent.snapshot is None  # entries read: its snapshot comes after them
    assert idle.rows == [] and idle.snapshot is not None
    alone = store.delivery.delivery_snapshot("idle", idle.token)
    got = idle.snapshot
    assert got.held and alone.held
    assert (got.info, got.notice_id, got.floor_ids, got.view, got.stream_len, got.rows) == (
        alone.info,
        alone.notice_id,
        alone.floor_ids,
        alone.view,
        alone.stream_len,
        alone.rows,
    )
    store.delivery.unlock_many([("idle", idle.token), ("sent", sent.token)])
    [plain] = store.delivery.begin_many(["idle"], 200)
    assert plain is not None and plain.snapshot is None  # not asked for: not taken
    store.delivery.unlock("idle", plain.token)


def test_the_notice_s_last_call_frees_the_lock_and_takes_the_hand_off_flag(bus: Bus) -> None:
    store = bus.store
    k = store.k
    bus.open_session("s")
    bus.send({"from": "hosta:me", "to_id": "s", "text": "x"})
    bus.deliver_session("s")  # in the inbox, its notice on the floor
    store.r.delete(k.s("s", "floor"))
    store.r.zadd(k.s("s", "new"), {"m-again": 1})
    start = store.delivery.begin_delivery("s", 200)
    assert start is not None
    keys = ("notice", "new", "wakeq", "events", "msgs")
    assert store.run("notice_take", "s", keys, ["ntc-1", 1])
    store.r.set(k.s("s", "again"), "1")  # a send asked for another run meanwhile
    calls = store.delivery.finish_calls("s", "ntc-1", "file", 5, heard=False, unlock=start.token)
    assert len(calls) == 1  # a notice on the floor: one call for all of it
    assert [int(x) for x in store.run_in_order(calls)[-1]] == [1, 1]
    assert not store.r.exists(k.s("s", "lock")) and not store.r.exists(k.s("s", "again"))
    assert "ntc-1" in store.r.hkeys(k.s("s", "floor"))  # recorded written before the unlock
    assert not store.r.exists(k.s("s", "notice"))
    # Not ours any more: the lock stays its holder's; the flag is taken all the same.
    store.r.set(k.s("s", "lock"), "another")
    store.r.set(k.s("s", "again"), "1")
    calls = store.delivery.finish_calls("s", "ntc-2", "file", 6, heard=False, unlock=start.token)
    assert [int(x) for x in store.run_in_order(calls)[-1]] == [0, 1]
    assert store.r.get(k.s("s", "lock")) == "another"


def test_a_batch_of_due_wakes_makes_three_script_calls_a_session(
    make_bus: Callable[..., Bus], trips: RoundTrips
) -> None:
    # The start with its snapshot, the notice taken, the notice's records with the unlock.
    import time

    from bus.core.clock import ManualClock
    from bus.delivery.engine import deliver_many
    from tests.support.sessions import idle_with_blockers

    clock = ManualClock(int(time.time() * 1000))
    b = standalone(make_bus(clock=clock, wake_debounce_s=60.0))
    sids = [f"tw{i}" for i in range(10)]
    idle_with_blockers(b, sids)
    clock.set(int(time.time() * 1000))
    deliver_many(b.delivery, sids)  # the arrivals: each wake planned
    clock.advance(61_000)
    due = [sid for _what, sid in b.store.schedule.take_due(clock.now_ms() + 1_000, limit=100)]
    assert sorted(due) == sorted(sids)
    before = len(trips.commands)
    reports = deliver_many(b.delivery, due)
    assert all(n["wake"] for r in reports for n in r.notices)
    assert sum(len(r.notices) for r in reports) == len(sids)
    evals = trips.commands[before:].count("EVALSHA")
    assert evals == 3 * len(sids), trips.commands[before:]
