"""The store's receipts aggregate: receipts and outboxes (bus/store/receipts.py), held to its
contract on every backend (a standalone Redis and a Redis Cluster: tests/support/store_backends.py)."""

# ruff: noqa: F811  (the store fixture, imported from tests.support.store_backends)
from __future__ import annotations

from bus.store.store import Store
from tests.support.store_backends import SIDS, info, store  # noqa: F401  (the fixture)


def test_receipt_reads_answer_in_order_and_missing_reads_empty(store: Store) -> None:
    rows = [("s1", "m1"), ("s2", "m2")]
    assert store.receipts.receipts_exist(rows) == [False, False]
    # The recipient's [state, last_seen, opened_at, host] all unset.
    assert store.receipts.receipt_rows(rows) == [[{}, None, None, [None, None, None, None]]] * 2
    assert store.receipts.may_expire(["s1", "s2"], 10**13) == [False, False]
    pipe = store.pipeline()
    store.receipts.queue_outbox_add(pipe, "s1", {"s2|m2": 5, "s3|m3": 7}, keep=1, floor=0)
    pipe.execute()
    assert store.r.zrange(store.k.outbox("s1"), 0, -1) == ["s3|m3"]  # only the newest kept
    store.receipts.outbox_remove([("s1", "s3", "m3")])
    assert store.r.zcard(store.k.outbox("s1")) == 0


def test_a_bounced_receipt_opens_once_and_is_stamped(store: Store) -> None:
    pipe = store.pipeline()
    store.receipts.open_receipts(
        "s1", [("m1", ["bounced", "h:a", "s0", "", "no_session"])], 1000, 60_000, pipeline=pipe
    )
    pipe.execute()
    [[rc, _rec, _answer, _seen]] = store.receipts.receipt_rows([("s1", "m1")])
    assert rc["bounced"] == "1000" and rc["from"] == "h:a" and rc["reason"] == "no_session"
    store.receipts.mark_receipts("s1", "expired", ["m1"], 2000, 60_000)
    assert store.receipts.receipt_rows([("s1", "m1")])[0][0]["expired"] == "2000"
    assert store.receipts.receipts_exist([("s1", "m1"), ("s1", "m2")]) == [True, False]
