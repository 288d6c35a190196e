"""The store's events aggregate: each session's durability records, the subscriptions
reading them, the waits on them, and the compaction of the streams
(bus/store/subscriptions.py, bus/store/stream_compact.py), held to its contract on every
backend (tests/support/store_backends.py)."""

# ruff: noqa: F811  (the store fixture, imported from tests.support.store_backends)
from __future__ import annotations

import threading

import pytest

from bus.core.errors import BadInput
from bus.store.store import Store
from tests.support.store_backends import SIDS, store  # noqa: F401  (the fixture)


def test_a_session_without_records_reads_empty(store: Store) -> None:
    assert store.events.last_event_id("s1") == "0-0"
    assert store.events.events_bounds("s1") is None
    assert store.events.has_event("s1", "1-0") is False
    assert store.events.sub_cursors("sub1", ["s1", "s2"]) == {"s1": None, "s2": None}


def test_records_are_kept_in_order_and_found_by_id(store: Store) -> None:
    store.events.record("s1", "inbox", ids=["m1"])
    first = store.events.last_event_id("s1")
    store.events.record("s1", "inbox_read", ids=["m1"], thread="thr_1")
    last = store.events.last_event_id("s1")
    assert first != "0-0" and last != first
    assert store.events.has_event("s1", first) and store.events.has_event("s1", last)
    bounds = store.events.events_bounds("s1")
    assert bounds is not None and (bounds["first"], bounds["last"]) == (first, last)
    [(_, fields)] = store.r.xrange(store.k.s("s1", "events"), last, last)
    # A field that is not text is kept as JSON; the kind and the time are always there.
    assert fields["kind"] == "inbox_read" and fields["ids"] == '["m1"]'
    assert fields["thread"] == "thr_1" and int(fields["at"]) > 0


def test_a_subscription_s_cursors_move_and_reset(store: Store) -> None:
    created = store.events.sub_open("sub1", 1000)
    assert created == 1000 and store.events.sub_open("sub1", 2000) == 1000  # made once
    store.events.sub_commit("sub1", {"s1": "5-0", "s2": "7-1"})
    store.events.sub_commit("sub1", {})  # nothing to move: nothing written
    assert store.events.sub_cursors("sub1", ["s1", "s2", "s3"]) == {
        "s1": "5-0",
        "s2": "7-1",
        "s3": None,
    }
    store.events.sub_reset("sub1", ["s1", "s2"])
    assert store.events.sub_cursors("sub1", ["s1", "s2"]) == {"s1": None, "s2": None}
    assert store.events.sub_open("sub1", 3000) == 3000  # its record went with the reset


def test_a_bad_subscription_name_is_refused(store: Store) -> None:
    assert store.events.check_sub_name("my-sub") == "my-sub"
    with pytest.raises(BadInput):
        store.events.check_sub_name("no spaces {here}")


def test_a_reader_holds_at_most_its_limit_of_subscriptions(store: Store) -> None:
    assert store.events.sub_claim("r1", "a", 1000, 60_000, 2)
    assert store.events.sub_claim("r1", "b", 1000, 60_000, 2)
    assert not store.events.sub_claim("r1", "c", 1000, 60_000, 2)  # a third, new: refused
    assert store.events.sub_claim("r1", "a", 2000, 60_000, 2)  # one it holds: used again
    assert store.events.sub_claim("r2", "c", 1000, 60_000, 2)  # another reader's own count


def test_new_records_of_many_sessions_are_read_after_each_position(store: Store) -> None:
    for sid in SIDS:
        store.events.record(sid, "inbox", ids=[f"m-{sid}"])
    positions = {sid: "0-0" for sid in SIDS}
    positions["s0"] = store.events.last_event_id("s0")  # s0's record is behind its position
    rows = store.events.read_session_streams(
        store.blocking_client(),
        positions,
        stream="events",
        count=10,
        block_ms=100,
        stop=threading.Event(),
    )
    got = {sid: [f["ids"] for _, f in entries] for sid, entries in rows if entries}
    assert got == {sid: [f'["m-{sid}"]'] for sid in SIDS if sid != "s0"}
    with pytest.raises(ValueError):
        store.events.read_session_streams(
            store.blocking_client(),
            positions,
            stream="msgs",
            count=1,
            block_ms=100,
            stop=threading.Event(),
        )


def test_a_wait_answers_the_newest_record_after_the_cursor(store: Store) -> None:
    client = store.blocking_client()
    store.events.record("s1", "inbox", ids=["m1"])
    store.events.record("s1", "inbox", ids=["m2"])
    assert store.events.wait_event(client, "s1", "0-0", 1000) == store.events.last_event_id("s1")


def test_a_waiter_wakes_on_the_next_event_record(store: Store) -> None:
    client, pool = store.events.waiting_client(1.0, "test-wait")
    try:
        after = store.events.last_event_id("s2")
        assert store.events.wait_events(client, "s2", after, 50) is None
        store.events.record("s2", "receipt", state="read")
        got = store.events.wait_events(client, "s2", after, 1000)
        assert got is not None and got == store.events.last_event_id("s2")
    finally:
        if pool is not None:
            pool.disconnect()


def test_the_streams_a_quiet_session_keeps_are_its_events_and_its_threads_logs(
    store: Store,
) -> None:
    store.r.zadd(store.k.s("s1", "threads"), {"thr_a": 500, "thr_b": 50, "#m1": -5})
    store.r.zadd(store.k.s("s2", "threads"), {"thr_a": 500})
    keys = store.events.session_streams(["s1", "s2"], threads_from=100)
    # thr_a once though both sessions list it; thr_b too old; the send answer's age no thread.
    assert keys == [store.k.s("s1", "events"), store.k.s("s2", "events"), store.k.t("thr_a", "log")]
    assert store.events.compact_streams([], 10, 1, 4096, 0) == 0
    assert store.events.drop_quiet_events([], 1000) == 0
