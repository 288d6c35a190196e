"""The store's delivery aggregate (bus/store/delivery.py, bus/store/kick.py; its locks in
test_store_locks.py): a delivery's grouped round trips, the one notice's steps and the
hosts' kick lists, held to their contract on every backend (a standalone Redis and a
Redis Cluster: tests/support/store_backends.py)."""

# ruff: noqa: F811  (the store fixture, imported from tests.support.store_backends)
from __future__ import annotations

from bus.store import packing
from bus.store.delivery import taken_records
from bus.store.store import Store
from tests.support.store_backends import SIDS, info, store  # noqa: F401  (the fixture)


def ingest(store: Store, sid: str, msg_id: str, at: int = 1000) -> None:
    """One message into ``sid``'s inbox, new, as the delivery takes it in."""
    msg = {"id": msg_id, "from": "h:a", "to_id": sid, "text": "hi", "ts": at}
    whole = packing.whole_record(
        msg, key="", thread="thr_t", sender_sid=None, at=at, wakes=False, why="fyi"
    )
    record, _one_m = packing.keep_ingested(whole, sid)
    store.inbox.take_into_inbox(sid, [msg_id, record, at, "0", "thr_t"])


def test_nothing_new_takes_no_notice_and_a_stranger_changes_nothing(store: Store) -> None:
    assert not any(store.delivery.take_notices([(sid, f"ntc-{sid}") for sid in SIDS], 1000))
    store.delivery.revert_notice("s1", "ntc-none", 1000, "test")
    store.delivery.notice_written("s1", "ntc-none", 1000, "file")
    assert store.inbox.notice_in_flight("s1") is None and store.inbox.floor_notice_ids("s1") == []
    assert store.delivery.floor_woken("s1", 1000) == []
    assert store.delivery.finish_notices([]) == []


def test_a_notice_takes_whats_new_across_slots_and_gives_it_back_on_revert(store: Store) -> None:
    for sid in SIDS:
        store.sessions.put_session(info(sid))
        ingest(store, sid, f"{sid}-m")
    taken = store.delivery.take_notices([(sid, f"ntc-{sid}") for sid in SIDS], 2000)
    for sid, reply in zip(SIDS, taken, strict=True):
        [record] = [packing.restore_record(r, sid) for r in taken_records(reply)]
        assert record["id"] == f"{sid}-m"
        assert store.inbox.notice_in_flight(sid) == f"ntc-{sid}" and store.inbox.new_ids(sid) == []
    # One notice in flight at a time: nothing more is taken meanwhile.
    assert not store.delivery.take_notices([(SIDS[0], "ntc-again")], 2001)[0]
    store.delivery.revert_notice(SIDS[0], f"ntc-{SIDS[0]}", 2002, "floor: test")
    assert store.inbox.notice_in_flight(SIDS[0]) is None and store.inbox.new_ids(SIDS[0]) == [
        f"{SIDS[0]}-m"
    ]


def test_a_written_notice_waits_on_the_floor_and_its_finish_frees_the_lock(store: Store) -> None:
    store.sessions.put_session(info("s1"))
    ingest(store, "s1", "m1")
    assert store.delivery.take_notices([("s1", "ntc-1")], 2000)[0]
    token = store.delivery.lock("s1")
    assert token is not None
    [(freed, again)] = store.delivery.finish_notices(
        [{"sid": "s1", "nid": "ntc-1", "via": "file", "now": 2001, "heard": False, "unlock": token}]
    )
    assert freed and not again and store.delivery.lock("s1") is not None
    assert store.inbox.notice_in_flight("s1") is None and store.inbox.floor_notice_ids("s1") == [
        "ntc-1"
    ]
    assert store.inbox.confirm_notices("s1", ["ntc-1"], "drain", 2002) == 1
    assert store.inbox.floor_notice_ids("s1") == []


def test_a_heard_notice_is_confirmed_and_finished_in_one_script_call(store: Store) -> None:
    # The socket's ack confirms the notice inside notice_finish.lua (parts/drained.lua):
    # one call, where a floor_drained.lua call went before it.
    calls = store.delivery.finish_calls("s1", "ntc-1", "socket", 1, heard=True, unlock="tok")
    assert len(calls) == 1
    assert calls[0][:2] == ("EVALSHA", store.script("notice_finish").sha)
    written = store.delivery.finish_calls("s1", "ntc-1", "file", 1, heard=False)
    assert len(written) == 1 and written[0][1] == calls[0][1]


# -- the hosts' kick lists (bus/store/kick.py) ------------------------------------------------


def test_a_kick_is_pushed_only_while_a_loop_of_the_host_is_alive(store: Store) -> None:
    assert store.delivery.push_kicks("h1", ["s1"]) is False  # no loop: the caller dispatches
    assert store.delivery.take_kicks("h1", "loopA", 10) == []
    store.delivery.kick_alive("h1", 60_000)
    assert store.delivery.push_kicks("h1", ["s1", "s2"]) is True
    assert store.delivery.push_kicks("h2", ["s3"]) is False  # another host's: none alive
    assert store.delivery.take_kicks("h1", "loopA", 1) == ["s1"]
    assert store.delivery.take_kicks("h1", "loopA", 10) == ["s2"]
    assert store.r.lrange(store.k.kick_taken("h1", "loopA"), 0, -1) == ["s1", "s2"]
    store.delivery.done_kicks("h1", "loopA")
    assert store.r.exists(store.k.kick_taken("h1", "loopA")) == 0


def test_a_wait_takes_the_next_kick_and_says_how_many_wait_behind_it(store: Store) -> None:
    store.delivery.kick_alive("h1", 60_000)
    store.delivery.push_kicks("h1", ["s1", "s2", "s3"])
    client, pool = store.delivery.kick_client(1.0, "test-kick")
    try:
        assert store.delivery.wait_kick(client, "h1", "loopA", 0.1) == (["s1"], 2)
        # clear: what the loop took before (s1, delivered) goes in the same round trip.
        assert store.delivery.wait_kick(client, "h1", "loopA", 0.1, clear=True) == (["s2"], 1)
        assert store.r.lrange(store.k.kick_taken("h1", "loopA"), 0, -1) == ["s2"]
        store.delivery.take_kicks("h1", "loopA", 10)
        assert store.delivery.wait_kick(client, "h1", "loopA", 0.1) == ([], 0)  # none came
    finally:
        if pool is not None:
            pool.disconnect()


def test_a_dead_loop_s_taken_kicks_go_back_to_the_head_of_the_list(store: Store) -> None:
    store.delivery.kick_alive("h1", 60_000)
    store.delivery.push_kicks("h1", ["s1", "s2", "s3"])
    store.delivery.kick_beat("h1", "dead", 60_000)
    store.delivery.take_kicks("h1", "dead", 2)  # took s1, s2 and then stopped beating
    store.delivery.kick_beat("h1", "live", 60_000)
    assert store.delivery.reclaim_kicks("h1", 60_000) == 0  # both beat just now
    # Every beat is older than -1 ms: both loops count as dead; "live" took nothing.
    assert store.delivery.reclaim_kicks("h1", -1) == 2
    assert store.r.lrange(store.k.kick_list("h1"), 0, -1) == ["s1", "s2", "s3"]
    store.delivery.kick_gone("h1", "live")
    assert "live" not in store.r.hkeys(store.k.kick_loops("h1"))
