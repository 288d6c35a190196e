"""The message id -> receiver index in day buckets (bus/store/receipt_index.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from bus.api import Bus
from bus.core.models import now_ms
from bus.store import receipt_index
from bus.store.receipt_index import BUCKETS, DAY_MS, KEEP_DAYS, bucket_of, day_of


@pytest.mark.parametrize(
    ("msg_id", "bucket"),
    [("m1", 15), ("many-1", 0), ("env-d11130b6-511e-48b6-935a-13c85991b826", 4)],
)
def test_an_ids_bucket_is_its_crc32_the_same_in_every_process(msg_id: str, bucket: int) -> None:
    assert bucket_of(msg_id) == bucket and 0 <= bucket < BUCKETS


@pytest.mark.parametrize(
    ("ms", "day"), [(0, 0), (DAY_MS - 1, 0), (DAY_MS, 1), (20422 * DAY_MS + 5, 20422)]
)
def test_the_day_is_utc_days_since_the_epoch(ms: int, day: int) -> None:
    assert day_of(ms) == day


def test_a_batch_indexes_every_id_in_a_few_hashes_not_a_key_each(
    make_bus: Callable[..., Bus],
) -> None:
    b = make_bus()
    for sid in ("s1", "s2"):
        b.open_session(sid)
    b.send_many(
        [
            {"id": f"ix-{n}", "from": "hx:p", "to_id": f"s{n % 2 + 1}", "text": "t"}
            for n in range(300)
        ]
    )
    r, k = b.store.r, b.store.k
    assert not list(r.scan_iter(match=f"{k.prefix}:{{m:*}}:rcpt"))  # no per-id key
    buckets = list(r.scan_iter(match=f"{k.prefix}:{{rc:*}}:rcpt"))
    assert 0 < len(buckets) <= BUCKETS
    assert all(0 < r.ttl(key) <= receipt_index.BUCKET_TTL_S for key in buckets)
    for n in range(300):
        assert b.store.recipient_of(f"ix-{n}") == f"s{n % 2 + 1}"
    assert b.store.recipient_of("ix-none") is None


def test_ids_are_found_for_the_whole_retention(bus: Bus) -> None:
    r, k, now = bus.store.r, bus.store.k, now_ms()
    old = now - KEEP_DAYS * DAY_MS  # indexed seven days ago: still answered
    receipt_index.index(r, k, [("aged", "s-old")], old)
    assert receipt_index.lookup(r, k, "aged", now) == "s-old"
    assert receipt_index.lookup(r, k, "aged", now + DAY_MS) is None  # past the retention
    receipt_index.index(r, k, [("gone", "s1")], now)
    receipt_index.unindex(r, k, "gone", now)
    assert bus.store.recipient_of("gone") is None
