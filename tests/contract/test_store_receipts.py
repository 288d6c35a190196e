"""The store's receipts side: receipts, outboxes, the wait (bus/store/receipts.py), held to its
contract on every backend (a standalone Redis and a Redis Cluster: tests/support/store_backends.py)."""

# ruff: noqa: F811  (the store fixture, imported from tests.support.store_backends)
from __future__ import annotations

from bus.store.store import Store
from tests.support.store_backends import SIDS, info, store  # noqa: F401  (the fixture)


def test_receipt_reads_answer_in_order_and_missing_reads_empty(store: Store) -> None:
    rows = [("s1", "m1"), ("s2", "m2")]
    assert store.receipts_exist(rows) == [False, False]
    # The recipient's [state, last_seen, opened_at, host] all unset.
    assert store.receipt_rows(rows) == [[{}, None, None, [None, None, None, None]]] * 2
    assert store.may_expire(["s1", "s2"], 10**13) == [False, False]
    pipe = store.pipeline()
    store.queue_outbox_add(pipe, "s1", {"s2|m2": 5, "s3|m3": 7}, keep=1, floor=0)
    pipe.execute()
    assert store.r.zrange(store.k.outbox("s1"), 0, -1) == ["s3|m3"]  # only the newest kept
    store.outbox_remove([("s1", "s3", "m3")])
    assert store.r.zcard(store.k.outbox("s1")) == 0


def test_a_bounced_receipt_opens_once_and_is_stamped(store: Store) -> None:
    pipe = store.pipeline()
    store.open_receipts(
        "s1", [("m1", ["bounced", "h:a", "s0", "", "no_session"])], 1000, 60_000, pipeline=pipe
    )
    pipe.execute()
    [[rc, _rec, _answer, _seen]] = store.receipt_rows([("s1", "m1")])
    assert rc["bounced"] == "1000" and rc["from"] == "h:a" and rc["reason"] == "no_session"
    store.mark_receipts("s1", "expired", ["m1"], 2000, 60_000)
    assert store.receipt_rows([("s1", "m1")])[0][0]["expired"] == "2000"
    assert store.receipts_exist([("s1", "m1"), ("s1", "m2")]) == [True, False]


def test_a_waiter_wakes_on_the_next_event_record(store: Store) -> None:
    client, pool = store.waiting_client(1.0, "test-wait")
    try:
        after = store.last_event_id("s2")
        assert store.wait_events(client, "s2", after, 50) is None
        store.record("s2", "receipt", state="read")
        got = store.wait_events(client, "s2", after, 1000)
        assert got is not None and got == store.last_event_id("s2")
    finally:
        if pool is not None:
            pool.disconnect()
