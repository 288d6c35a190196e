"""The message id -> receiver index in day buckets (bus/store/receipt_index.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from redis.crc import key_slot

from bus.api import Bus
from bus.core.models import now_ms
from bus.store import receipt_index
from bus.store.keys import DAY_MS, IDS_KEEP_DAYS
from bus.store.receipt_index import BUCKETS, bucket_of, day_of
from tests.support.waiting import wait_for


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
    buckets = list(r.scan_iter(match=f"{k.prefix}:{{rc:*}}:rcpt:*"))
    assert 0 < len(buckets) <= BUCKETS
    assert all(0 < r.ttl(key) <= receipt_index.BUCKET_TTL_S for key in buckets)
    for n in range(300):
        assert b.store.queue.recipient_of(f"ix-{n}") == f"s{n % 2 + 1}"
    assert b.store.queue.recipient_of("ix-none") is None


def test_ids_are_found_for_the_whole_retention(bus: Bus) -> None:
    r, k, now = bus.store.r, bus.store.k, now_ms()
    old = now - IDS_KEEP_DAYS * DAY_MS  # indexed seven days ago: still answered
    receipt_index.index(r, k, [("aged", "s-old")], old)
    assert receipt_index.lookup(r, k, "aged", now) == "s-old"
    assert receipt_index.lookup(r, k, "aged", now + DAY_MS) is None  # past the retention
    receipt_index.index(r, k, [("gone", "s1")], now)
    receipt_index.unindex(r, k, "gone", now)
    assert bus.store.queue.recipient_of("gone") is None


def test_a_buckets_days_share_one_slot_and_buckets_spread_over_slots(bus: Bus) -> None:
    # One lookup reads a bucket's every day kept: on a cluster, one node answers it.
    k, day = bus.store.k, day_of(now_ms())
    slots = {
        b: {key_slot(k.rcpt_bucket(day - back, b).encode()) for back in range(IDS_KEEP_DAYS + 2)}
        for b in range(BUCKETS)
    }
    assert all(len(s) == 1 for s in slots.values())
    assert len({next(iter(s)) for s in slots.values()}) == BUCKETS


def test_the_buckets_of_earlier_versions_are_moved_once_and_keep_their_expiry(bus: Bus) -> None:
    r, k, now = bus.store.r, bus.store.k, now_ms()
    day = day_of(now)
    ids = {f"old-{n}": f"s{n % 3}" for n in range(40)}
    written: dict[str, tuple[str, int]] = {}  # old name -> (new name, its expiry)
    for n, (msg_id, sid) in enumerate(ids.items()):
        back = n % (IDS_KEEP_DAYS + 1)  # spread over the days kept, newest to oldest
        old = k.rcpt_bucket_day_first(day - back, bucket_of(msg_id))
        r.hset(old, msg_id, sid)
        r.expire(old, 1000 + back)
        written[old] = (k.rcpt_bucket(day - back, bucket_of(msg_id)), 1000 + back)
    assert bus.store.queue.recipient_of("old-1") is None  # not found under the new names
    assert bus.store.queue.move_recipient_index() == len(written)
    for msg_id, sid in ids.items():
        assert bus.store.queue.recipient_of(msg_id) == sid
    assert bus.store.queue.recipients_of(list(ids)) == ids
    for old, (new, ttl) in written.items():
        assert not r.exists(old)
        assert ttl - 30 < r.ttl(new) <= ttl
    # Once: a bucket written under the old name now stays where it is.
    again = k.rcpt_bucket_day_first(day, 0)
    r.hset(again, "late", "s9")
    assert bus.store.queue.move_recipient_index() == 0
    assert r.exists(again) and bus.store.queue.recipient_of("late") is None
    r.delete(again)


def test_the_scheduler_moves_them_when_it_starts(bus: Bus) -> None:
    import threading

    from bus.delivery import scheduler

    r, k = bus.store.r, bus.store.k
    old = k.rcpt_bucket_day_first(day_of(now_ms()), bucket_of("early"))
    r.hset(old, "early", "s1")
    stop = threading.Event()
    loop = threading.Thread(target=scheduler.run, args=(bus, stop), daemon=True)
    loop.start()
    try:
        wait_for(lambda: bus.store.queue.recipient_of("early") == "s1", 30, what="the bucket moved")
    finally:
        stop.set()
        loop.join(30)
    assert not r.exists(old) and r.exists(k.rcpt_moved)
