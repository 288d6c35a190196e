"""The store's items aggregate: items and their threads, typed request threads, the bytes
of pictures kept (bus/store/items.py), held to its contract on every backend
(tests/support/store_backends.py)."""

# ruff: noqa: F811  (the store fixture, imported from tests.support.store_backends)
from __future__ import annotations

import json

from bus.store.store import Store
from tests.support.store_backends import SIDS, store  # noqa: F401  (the fixture)


def test_a_session_without_items_reads_empty(store: Store) -> None:
    assert store.items.item("s1", "k") is None
    assert store.items.items_of("s1") == []
    assert store.items.items_of_many(["s1", "s2"]) == [[], []]
    assert store.items.item_thread("s1", "k") == []
    assert store.items.last_item_entries([("s1", "k")]) == [None]
    assert store.items.update_item("s1", "k", {"status": "done"}, None) is None


def test_a_re_post_is_the_next_revision_and_keeps_its_creation_time(store: Store) -> None:
    first = store.items.post_item("s1", "k", {"key": "k", "revision": 1, "createdAt": 10})
    assert first == {"key": "k", "revision": 1, "createdAt": 10}
    again = store.items.post_item("s1", "k", {"key": "k", "revision": 1, "createdAt": 99})
    assert (again["revision"], again["createdAt"]) == (2, 10)
    assert store.items.item("s1", "k") == again


def test_an_update_patches_the_item_and_appends_its_entry_in_order(store: Store) -> None:
    store.items.post_item("s1", "k", {"key": "k", "status": "open", "answer": "x"})
    got = store.items.update_item("s1", "k", {"status": "done", "answer": None}, {"n": 1})
    assert got == {"key": "k", "status": "done", "answer": None}
    store.items.update_item("s1", "k", {}, {"n": 2})
    store.items.update_item("s1", "k", {"status": "open"}, None)  # no entry: none appended
    assert store.items.item_thread("s1", "k") == [{"n": 1}, {"n": 2}]
    assert store.items.last_item_entries([("s1", "k"), ("s1", "none")]) == [{"n": 2}, None]
    assert store.items.item("s1", "k") == {"key": "k", "status": "open", "answer": None}


def test_items_of_many_sessions_answer_in_order_across_slots(store: Store) -> None:
    for n, sid in enumerate(SIDS):
        store.items.post_item(sid, f"k{n}", {"key": f"k{n}"})
    got = store.items.items_of_many(list(reversed(SIDS)))
    assert [[i["key"] for i in items] for items in got] == [
        [f"k{n}"] for n in reversed(range(len(SIDS)))
    ]
    assert [i["key"] for i in store.items.items_of("s3")] == ["k3"]


def test_a_label_is_given_once_and_a_listing_only_moves_later(store: Store) -> None:
    store.items.open_request_thread("thr_1", {"key": "review", "state": "offered"})
    store.items.label_thread("thr_1", "first")
    store.items.label_thread("thr_1", "second")
    assert store.r.hget(store.k.t("thr_1", "meta"), "label") == "first"
    store.items.list_thread("s1", "thr_1", 200)
    store.items.list_thread("s1", "thr_1", 100)  # earlier: the listing stays at 200
    assert store.r.zscore(store.k.s("s1", "threads"), "thr_1") == 200
    store.items.list_thread("s1", "thr_1", 300)
    assert store.r.zscore(store.k.s("s1", "threads"), "thr_1") == 300


def _decision(expect: str, offered_by: str, new: str, env_id: str) -> list[object]:
    """decide.lua's arguments: the state read, the new one, one envelope logged."""
    env = json.dumps({"id": env_id})
    return [expect, offered_by, new, "", "", env_id, env, 5, "h:a", "p", 100]


def test_a_decision_applies_only_to_the_state_it_was_read_in(store: Store) -> None:
    assert store.items.decide("thr_1", _decision("offered", "", "accepted", "e1")) == "missing"
    store.items.open_request_thread("thr_1", {"key": "review", "state": "offered"})
    assert store.items.decide("thr_1", _decision("offered", "", "accepted", "e1")) == "ok"
    # A second party read the thread as offered too: its decision finds it changed.
    assert store.items.decide("thr_1", _decision("offered", "", "declined", "e2")) == "conflict"
    meta = store.r.hgetall(store.k.t("thr_1", "meta"))
    assert meta["state"] == "accepted" and meta["count"] == "1"
    assert [f["id"] for _, f in store.r.xrange(store.k.t("thr_1", "log"))] == ["e1"]


def test_picture_bytes_are_counted_up_to_the_cap_and_given_back(store: Store) -> None:
    assert store.items.take_picture_bytes("s1", 600, 1000)
    assert not store.items.take_picture_bytes("s1", 500, 1000)  # would pass the cap
    assert store.items.take_picture_bytes("s1", 400, 1000)  # nothing counted by the refusal
    store.items.give_picture_bytes("s1", 400)
    assert store.items.take_picture_bytes("s1", 400, 1000)
    assert not store.items.take_picture_bytes("s1", 1, 1000)
