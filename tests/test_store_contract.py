"""The storage contract (bus/store/store.py's docstrings), held against every backend.

Each test runs on a standalone Redis and on a real 3-master Redis Cluster (started once
per session, see ``redis_cluster_url``). Sessions are spread over many slots, so the
cluster's multi-session reads cross nodes.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.crc import key_slot

from bus.core.errors import Unavailable
from bus.core.models import SessionInfo
from bus.store.cluster import OrderedBatch, cluster_client, read_streams
from bus.store.keys import Keys
from bus.store.many import SweepView
from bus.store.store import Store

SIDS = [f"s{i}" for i in range(12)]


@pytest.fixture(params=["redis", "cluster"])
def store(request: pytest.FixtureRequest, prefix: str) -> Iterator[Store]:
    client: Any
    if request.param == "redis":
        client = redis.Redis.from_url(request.getfixturevalue("redis_url"), decode_responses=True)
    else:
        client = cluster_client(request.getfixturevalue("redis_cluster_url"))
    s = Store(client, Keys(prefix), lock_ttl_ms=2000)
    yield s
    for key in client.scan_iter(match=f"{prefix}:*", count=1000):
        client.delete(key)
    client.close()


def info(sid: str, handle: str = "h:a", opened_at: int = 0) -> SessionInfo:
    return SessionInfo(session=sid, handle=handle, host="hosta", opened_at=opened_at)


def test_the_sessions_used_here_span_several_cluster_nodes() -> None:
    # 3 masters split 16384 slots in thirds; the contract's sessions must reach all three.
    k = Keys("p")
    assert len({key_slot(k.s(sid, "session").encode()) * 3 // 16384 for sid in SIDS}) == 3


def test_ping_answers(store: Store) -> None:
    store.ping()


def test_ping_of_a_server_that_does_not_answer_is_unavailable() -> None:
    dead = Store(redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2), Keys("p"))
    with pytest.raises(Unavailable):
        dead.ping()


def test_a_missing_session_reads_empty(store: Store) -> None:
    assert store.get_session("nobody") is None
    assert store.session_ids() == [] and store.sessions() == []
    assert store.sessions_by_handle("h:none") == []
    assert store.first_answer("nobody", "m1") is None and store.recipient_of("m1") is None
    assert store.cursor("nobody") == "0-0" and store.backlog("nobody") == 0
    assert store.read_after("nobody", "0-0") == [] and store.rawflight("nobody") is None
    assert store.next_due() is None


def test_sessions_put_update_and_list_across_slots(store: Store) -> None:
    for n, sid in enumerate(SIDS):
        store.put_session(info(sid, handle="h:even" if n % 2 == 0 else "h:odd", opened_at=n + 1))
    assert store.session_ids() == SIDS
    assert [s.session for s in store.sessions()] == SIDS
    assert [s.session for s in store.sessions_by_handle("h:even")] == sorted(SIDS[::2])
    store.update_session("s3", state="running", wake_cmd=None, prompt_waiting=True)
    got = store.get_session("s3")
    assert got is not None and got.state == "running" and got.prompt_waiting
    assert got.updated_at > 0
    assert store.incr_turns("s3") == 1 and store.incr_turns("s3") == 2
    # Put replaces the record: a field left out of the new one is gone.
    store.put_session(info("s3", handle="h:moved"))
    again = store.get_session("s3")
    assert again is not None and again.turns == 0 and again.state == "idle"
    # The old handle's index still lists s3, but the record no longer carries it.
    assert "s3" not in [s.session for s in store.sessions_by_handle("h:odd")]


def test_append_stores_an_id_once_and_dispatches_once(store: Store) -> None:
    store.put_session(info("s1"))
    first = store.append("s1", "m-1", json.dumps({"id": "m-1"}), '{"n": 1}')
    assert first == (True, '{"n": 1}', True)
    # Again: nothing new, the first answer, no second dispatch.
    assert store.append("s1", "m-1", json.dumps({"id": "m-1"}), '{"n": 2}') == (
        False,
        '{"n": 1}',
        False,
    )
    # Another id while the dispatch flag is up: stored, no dispatch.
    assert store.append("s1", "m-2", json.dumps({"id": "m-2"}), '{"n": 3}')[0::2] == (True, False)
    # Restored whole (bus/store/packing.py): what the key says (the id, ok, duplicate) comes back.
    whole = {"ok": True, "id": "m-1", "n": 1, "duplicate": False}
    assert store.first_answer("s1", "m-1") == whole
    assert store.first_answers("s1", ["m-2", "nope"]) == [{**whole, "id": "m-2", "n": 3}, None]
    assert store.recipient_of("m-1") == "s1"
    rows = store.read_after("s1", "0-0")
    assert [f["id"] for _e, f in rows] == ["m-1", "m-2"]
    assert store.backlog("s1") == 2


def test_cursor_advance_and_rawflight(store: Store) -> None:
    for i in range(3):
        store.append("s2", f"m{i}", "{}", "{}")
    rows = store.read_after("s2", "0-0")
    store.set_rawflight("s2", rows[0][0], "m0")
    assert store.rawflight("s2") == {"stream_id": rows[0][0], "id": "m0"}
    store.advance("s2", rows[0][0])
    assert store.cursor("s2") == rows[0][0] and store.rawflight("s2") is None
    assert [f["id"] for _e, f in store.read_after("s2", store.cursor("s2"))] == ["m1", "m2"]
    assert store.backlog("s2") == 2
    store.advance("s2", rows[-1][0])
    assert store.backlog("s2") == 0


def test_the_dispatch_flag_is_taken_once_until_cleared(store: Store) -> None:
    assert store.mark_pending("s4") is True
    assert store.mark_pending("s4") is False
    store.clear_pending("s4")
    assert store.mark_pending("s4") is True


def test_the_lock_has_one_holder_and_only_its_token_releases_it(store: Store) -> None:
    token = store.lock("s5")
    assert token is not None and store.lock("s5") is None
    assert store.extend_lock("s5", token) is True
    assert store.extend_lock("s5", "not-the-token") is False
    store.unlock("s5", "not-the-token")
    assert store.lock("s5") is None
    store.unlock("s5", token)
    assert store.lock("s5") is not None


def test_the_schedule_keeps_the_earlier_time_and_hands_each_entry_out_once(
    store: Store,
) -> None:
    store.schedule("due", "s6", 2000)
    store.schedule("due", "s6", 1000)  # earlier wins
    store.schedule("due", "s6", 3000)  # later is ignored
    store.schedule("retry", "s7", 5000, earliest=False)
    store.schedule("retry", "s7", 6000, earliest=False)  # replaced
    store.schedule("due", "s8", 1500)
    store.unschedule("due", "s8")
    assert store.next_due() == 1000
    assert store.take_due(999) == []
    assert store.take_due(5999) == [("due", "s6")]
    assert store.take_due(5999) == []
    assert store.take_due(6000) == [("retry", "s7")]
    assert store.next_due() is None


def test_take_due_from_many_threads_hands_out_each_entry_exactly_once(store: Store) -> None:
    for i in range(200):
        store.schedule("due", SIDS[i % len(SIDS)] + f"x{i}", 10)
    got: list[tuple[str, str]] = []
    lock = threading.Lock()

    def taker() -> None:
        while True:
            batch = store.take_due(100, limit=7)
            if not batch:
                return
            with lock:
                got.extend(batch)

    threads = [threading.Thread(target=taker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(got) == 200 and len(set(got)) == 200


def test_records_go_to_the_sessions_event_log(store: Store) -> None:
    store.record("s9", "inbox", ids=["a", "b"], note="x")
    rows = store.r.xrange(store.k.s("s9", "events"))
    assert len(rows) == 1
    fields = rows[0][1]
    assert fields["kind"] == "inbox" and json.loads(fields["ids"]) == ["a", "b"]
    assert fields["note"] == "x" and int(fields["at"]) > 0


def test_the_trim_floor_keeps_the_last_delivered_while_some_wait(store: Store) -> None:
    for i in range(30):
        store.append("s10", f"m{i}", "{}", "{}")
    rows = store.read_after("s10", "0-0")
    store.advance("s10", rows[-2][0])  # the newest one is not taken yet
    store.set_trim_floor("s10", keep=5)
    assert store.r.get(store.k.s("s10", "trim")) == rows[-7][0]
    assert store.read_after("s10", store.cursor("s10")) == rows[-1:]


def test_a_queue_taken_whole_is_emptied(store: Store) -> None:
    for i in range(30):
        store.append("s11", f"m{i}", "{}", "{}")
    rows = store.read_after("s11", "0-0")
    store.advance("s11", rows[-1][0])
    store.set_trim_floor("s11", keep=5)
    assert store.r.xlen(store.k.s("s11", "stream")) == 0
    store.append("s11", "m30", "{}", "{}")
    assert [f["id"] for _e, f in store.read_after("s11", store.cursor("s11"))] == ["m30"]


def test_one_sweep_claim_per_interval(store: Store) -> None:
    assert store.claim_sweep(60_000) is True
    assert store.claim_sweep(60_000) is False


def test_a_pipeline_runs_scripts_and_commands_in_order_across_slots(store: Store) -> None:
    pipe = store.pipeline()
    for sid in SIDS[:6]:
        store.run("extend_lock", sid, ("lock",), ["nobody", 1000], client=pipe)
        pipe.set(store.k.s(sid, "cursor"), "5-0")
        pipe.get(store.k.s(sid, "cursor"))
    replies = pipe.execute()
    assert replies == [0, True, "5-0"] * 6
    if store.cluster:
        assert isinstance(pipe, OrderedBatch)


def test_a_pipeline_script_is_loaded_again_on_a_node_that_lost_it(store: Store) -> None:
    if not store.cluster:
        pytest.skip("the standalone server is shared with other tests: no SCRIPT FLUSH there")
    store.r.script_flush()  # every node forgets every script (a restart would)
    pipe = store.pipeline()
    for sid in SIDS:
        store.run("extend_lock", sid, ("lock",), ["nobody", 1000], client=pipe)
    assert pipe.execute() == [0] * len(SIDS)
    store.r.script_flush()
    assert [store.extend_lock(sid, "nobody") for sid in SIDS] == [False] * len(SIDS)


def test_reading_many_streams_answers_each_after_its_position(store: Store) -> None:
    for sid in SIDS:
        store.append(sid, f"{sid}-a", "{}", "{}")
    positions = {store.k.s(sid, "stream"): "0-0" for sid in SIDS}
    got = read_streams(store.r, positions, count=10, block_ms=100, stop=threading.Event())
    assert {key: [f["id"] for _e, f in entries] for key, entries in got} == {
        store.k.s(sid, "stream"): [f"{sid}-a"] for sid in SIDS
    }
    latest = {key: entries[-1][0] for key, entries in got}
    assert read_streams(store.r, latest, count=10, block_ms=50, stop=threading.Event()) == []


# -- the inbox, thread, member and item side (bus/store/inbox.py, bus/store/items.py) ------


def test_inbox_and_thread_reads_of_missing_things_answer_empty(store: Store) -> None:
    assert store.last_seen("nobody") is None and store.notice_in_flight("nobody") is None
    assert store.records("nobody", ["m1"]) == [] and store.all_records("nobody") == []
    assert store.new_ids("nobody") == [] and store.floor_notice_ids("nobody") == []
    assert store.threads_of("nobody") == [] and store.last_event_id("nobody") == "0-0"
    assert store.thread_meta("thr_none") == {} and not store.thread_exists("thr_none")
    assert store.thread_log("thr_none") == [] and store.thread_field("thr_none", "x") is None
    assert store.member_status("ws", "luke") is None and store.members("ws") == {}
    assert store.item("nobody", "k") is None and store.items_of("nobody") == []
    assert store.item_thread("nobody", "k") == []
    assert store.update_item("nobody", "k", {"title": "t"}, None) is None
    assert store.inbox_view("nobody") == {
        "pending": 0,
        "first_wake_at": None,
        "first_pending_at": None,
        "building": 0,
        "retry_at": None,
        "floor_wake_at": None,
        "floor_first_at": None,
    }


def test_the_delegator_is_recorded_once(store: Store) -> None:
    store.put_session(info("s1"))
    assert store.set_delegator_once("s1", "boss")
    assert not store.set_delegator_once("s1", "other")
    got = store.get_session("s1")
    assert got is not None and got.delegator == "boss"


def test_presence_touches_only_an_existing_session(store: Store) -> None:
    store.touch_seen("ghost", 5)
    assert store.get_session("ghost") is None
    store.put_session(info("s1"))
    store.touch_seen("s1", 1234)
    assert store.last_seen("s1") == 1234


def test_waiters_are_taken_once_and_answers_reach_them(store: Store) -> None:
    store.add_waiter("s2", "m1")
    store.add_waiter("s2", "m2")
    store.drop_waiter("s2", "m2")
    assert store.take_waiters("s2") == ["m1"] and store.take_waiters("s2") == []
    store.push_answers("s2", ["m1"], {"ok": True, "state": "answered"})
    raw = store.r.lpop(store.answer_key("s2", "m1"))
    assert json.loads(raw) == {"ok": True, "state": "answered", "id": "m1"}


def test_revoked_tokens_members_and_the_hand_off_flag(store: Store) -> None:
    assert not store.is_revoked("j1")
    store.revoke("j1")
    assert store.is_revoked("j1")
    store.set_member("ws", "luke", "active")
    assert store.member_status("ws", "luke") == "active"
    assert store.members("ws") == {"luke": "active"}
    assert not store.take_again("s3")
    store.ask_again("s3", 2000)
    assert store.take_again("s3") and not store.take_again("s3")


def test_heartbeats_and_the_sweep_view(store: Store) -> None:
    store.beat("hosta", {"beat": 5, "pid": 42})
    store.beat("hosta", {"progress": 6}, done=True)
    store.beat("scheduler", {"beat": 7})
    got = store.beats(lambda name: None if name == "scheduler" else f"inbox.{name}")
    assert got == [
        ("hosta", {"beat": "5", "pid": "42", "progress": "6", "done": "1"}, 0),
        ("scheduler", {"beat": "7"}, 0),
    ]
    assert store.sweep_views(["nobody"]) == []
    store.put_session(info("s1"))
    store.schedule("due", "s1", 1000)
    [(got, view)] = store.sweep_views(["s1"])
    assert got.session == "s1"
    assert view == SweepView(False, None, False, 1000, None, [])


def test_counters_add_in_one_batch_and_read_back(store: Store) -> None:
    assert store.counters_read() == ({}, {})
    store.counter_incr("messages_in", 2)
    store.counter_add_many([("metrics", "wakes", 1), ("latency", "sum", 0.5)])
    store.counter_add_many([("latency", "count", 1), ("latency", "sum", 0.25)], atomic=True)
    counters, latency = store.counters_read()
    assert counters == {"messages_in": "2", "wakes": "1"}
    assert float(latency["sum"]) == 0.75 and latency["count"] == "1"
    with pytest.raises(ValueError):
        store.counter_add_many([("sessions", "x", 1)])


def test_batched_reads_answer_in_order_and_missing_reads_empty(store: Store) -> None:
    assert store.session_hosts(["nobody", "noone"]) == [None, None]
    store.r.hset(store.k.s("here", "session"), "host", "h1")
    assert store.session_hosts(["nobody", "here", "noone"]) == [None, "h1", None]
    store.r.hset(store.k.s("there", "session"), "host", "h2")
    # Hosts and dispatch flags of a due burst: the flags only where a session exists.
    assert store.hosts_flagged(["nobody", "there", "here"]) == [None, "h2", "h1"]
    assert store.r.get(store.k.s("there", "pending")) == "1"
    assert 0 < store.r.pttl(store.k.s("here", "pending")) <= store.lock_ttl_ms
    assert not store.r.exists(store.k.s("nobody", "pending"))
    assert store.hosts_flagged([]) == []
    assert store.thread_parties_many(["thr_a", "thr_b"]) == [(None, False), (None, False)]
    store.flag_dispatched(["s1", "s2"])  # sessions in different slots on a cluster
    assert store.r.get(store.k.s("s1", "pending")) == "1"
    assert 0 < store.r.pttl(store.k.s("s2", "pending")) <= store.lock_ttl_ms


def test_receipt_reads_answer_in_order_and_missing_reads_empty(store: Store) -> None:
    rows = [("s1", "m1"), ("s2", "m2")]
    assert store.receipts_exist(rows) == [False, False]
    assert store.receipt_rows(rows) == [[{}, None, None, [None, None, None]]] * 2
    assert store.may_expire(["s1", "s2"], 10**13) == [False, False]
    pipe = store.pipeline()
    store.queue_outbox_add(pipe, "s1", {"s2|m2": 5, "s3|m3": 7}, keep=1, floor=0)
    pipe.execute()
    assert store.r.zrange(store.k.outbox("s1"), 0, -1) == ["s3|m3"]  # only the newest kept
    store.outbox_remove([("s1", "s3", "m3")])
    assert store.r.zcard(store.k.outbox("s1")) == 0


def test_every_script_loads_whole_and_every_part_is_included() -> None:
    # A step two scripts run is written once (bus/store/lua/parts); Redis gets plain scripts.
    from bus.store.store import LUA_DIR, lua_source

    used: set[str] = set()
    for path in sorted(LUA_DIR.glob("*.lua")):
        raw = path.read_text()
        used.update(line.split()[1] for line in raw.splitlines() if line.startswith("--@include"))
        text = lua_source(path.stem)
        assert "--@include" not in text, path.name
        assert text.startswith(f"-- {path.name}:"), path.name  # headed by its own comment
    parts = {p.stem for p in (LUA_DIR / "parts").glob("*.lua")}
    assert used == parts
    assert "local function snapshot(" in lua_source("delivery_begin")
