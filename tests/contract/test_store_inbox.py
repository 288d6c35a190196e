"""The store's inbox aggregate: records, marks, threads, waiters, the turn's answer
(bus/store/inbox.py, bus/store/conversations.py), held to its contract on every backend (a standalone Redis and a Redis
Cluster: tests/support/store_backends.py)."""

# ruff: noqa: F811  (the store fixture, imported from tests.support.store_backends)
from __future__ import annotations

import json

from bus.store.store import Store
from tests.support.store_backends import SIDS, info, store  # noqa: F401  (the fixture)


def test_inbox_and_thread_reads_of_missing_things_answer_empty(store: Store) -> None:
    assert (
        store.sessions.last_seen("nobody") is None
        and store.inbox.notice_in_flight("nobody") is None
    )
    assert store.inbox.records("nobody", ["m1"]) == [] and store.inbox.all_records("nobody") == []
    assert store.inbox.new_ids("nobody") == [] and store.inbox.floor_notice_ids("nobody") == []
    assert store.inbox.threads_of("nobody") == [] and store.events.last_event_id("nobody") == "0-0"
    assert store.inbox.thread_meta("thr_none") == {} and not store.inbox.thread_exists("thr_none")
    assert (
        store.inbox.thread_log("thr_none") == []
        and store.inbox.thread_field("thr_none", "x") is None
    )
    assert store.members.member_status("ws", "luke") is None and store.members.members("ws") == {}
    assert store.items.item("nobody", "k") is None and store.items.items_of("nobody") == []
    assert store.items.item_thread("nobody", "k") == []
    assert store.items.update_item("nobody", "k", {"title": "t"}, None) is None
    assert store.inbox.inbox_view("nobody") == {
        "pending": 0,
        "first_wake_at": None,
        "first_pending_at": None,
        "building": 0,
        "retry_at": None,
        "floor_wake_at": None,
        "floor_first_at": None,
    }


def test_waiters_are_taken_once_and_answers_reach_them(store: Store) -> None:
    store.inbox.add_waiter("s2", "m1")
    store.inbox.add_waiter("s2", "m2")
    store.inbox.drop_waiter("s2", "m2")
    assert store.inbox.take_waiters("s2") == ["m1"] and store.inbox.take_waiters("s2") == []
    store.inbox.push_answers("s2", ["m1"], {"ok": True, "state": "answered"})
    raw = store.r.lpop(store.inbox.answer_key("s2", "m1"))
    assert json.loads(raw) == {"ok": True, "state": "answered", "id": "m1"}


def test_revoked_tokens_members_and_the_hand_off_flag(store: Store) -> None:
    assert not store.members.is_revoked("j1")
    store.members.revoke("j1")
    assert store.members.is_revoked("j1")
    store.members.set_member("ws", "luke", "active")
    assert store.members.member_status("ws", "luke") == "active"
    assert store.members.members("ws") == {"luke": "active"}
    assert not store.delivery.take_again("s3")
    store.delivery.ask_again("s3", 2000)
    assert store.delivery.take_again("s3") and not store.delivery.take_again("s3")


def test_a_turn_with_nothing_carried_answers_no_one(store: Store) -> None:
    store.sessions.put_session(info("s1"))
    assert store.inbox.answer_turn("s1", "done", 1000) == ([], [])
    assert store.inbox.answer_turn("s1", None, 1001) == ([], [])


def test_an_answer_pushed_is_popped_by_its_waiter_and_none_waits_out(store: Store) -> None:
    client = store.blocking_client()
    store.inbox.push_answers("s2", ["m1"], {"ok": True, "state": "answered"})
    got = store.inbox.pop_answer(client, "s2", "m1", 1.0)
    assert got is not None and json.loads(got)["state"] == "answered"
    assert store.inbox.pop_answer(client, "s2", "m1", 0.1) is None


def test_a_floor_sweep_of_no_notices_gives_nothing_back(store: Store) -> None:
    assert store.inbox.sweep_floor_notices("s3", 1000, 500, {}) == 0
    assert store.inbox.sweep_floor_notices("s3", 1000, 500, {"ntc-x": False}) == 0  # not recorded
