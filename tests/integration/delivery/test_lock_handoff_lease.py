"""The hand-off outlives its holder's lease's TTLs, and a batched run that lost its lease
leaves its session delivered (bus.delivery.engine, bus.delivery.engine): two holes the scheduler's sweep
used to cover, seconds late."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from bus.api import Bus
from bus.delivery.engine import deliver_many


def elapse(b: Bus, keys: list[str], ms: int) -> None:
    """``ms`` pass for ``keys``' TTLs (each key's TTL less ``ms``; gone when it runs out):
    the clock moved without a sleep."""
    r = b.store.r
    for key in keys:
        left = r.pttl(key)
        if left < 0:
            continue
        if left <= ms:
            r.delete(key)
        else:
            r.pexpire(key, left - ms)


def handed_off(make_bus: Callable[..., Bus], *, send: bool) -> tuple[Bus, str, list[str]]:
    """Session ``s`` held by a holder in a long run (renewing, not unlocked yet) and a
    delivery handed to it: the bus, the holder's token and the ``lock`` and ``again``
    keys."""
    b = make_bus()
    b.open_session("s")
    store = b.store
    token = store.delivery.lock("s")
    assert token is not None
    if send:
        b.send({"from": "hosta:me", "to_id": "s", "text": "behind a long run"})
    assert b.deliver_session("s").busy  # handed to the holder
    return b, token, [store.k.s("s", "lock"), store.k.s("s", "again")]


def test_a_hand_off_outlives_the_ttl_while_its_holder_renews_its_lease(
    make_bus: Callable[..., Bus],
) -> None:
    b, token, keys = handed_off(make_bus, send=True)
    store = b.store
    ttl = store.lock_ttl_ms
    for _ in range(4):  # four TTLs of a run, renewed every two thirds of a TTL
        elapse(b, keys, ttl * 2 // 3)
        assert store.delivery.extend_lock("s", token)  # the holder's renewal
    # The holder unlocks: the hand-off is still there for it.
    assert store.delivery.unlock_and_take_again("s", token)
    assert not store.r.exists(keys[1])


def test_a_hand_off_outlives_the_ttl_through_the_holders_fences(
    make_bus: Callable[..., Bus],
) -> None:
    b, token, keys = handed_off(make_bus, send=False)
    store = b.store
    for _ in range(4):  # the fence before each batch's snapshot extends the lease too
        elapse(b, keys, store.lock_ttl_ms * 2 // 3)
        assert store.delivery.delivery_snapshot("s", token).held
    assert store.delivery.unlock_and_take_again("s", token)


def test_the_hand_off_flag_lapses_with_a_dead_holders_lease(
    make_bus: Callable[..., Bus],
) -> None:
    b, token, keys = handed_off(make_bus, send=False)
    store = b.store
    assert store.delivery.extend_lock("s", token)
    again_ttl = store.r.pttl(keys[1])
    assert 0 < again_ttl <= store.lock_ttl_ms  # no flag kept forever
    elapse(b, keys, store.lock_ttl_ms)  # the holder died: nothing renews either
    assert not store.r.exists(keys[0]) and not store.r.exists(keys[1])
    assert not store.delivery.extend_lock("s", token)


@pytest.mark.parametrize("batched", [1, 3])
def test_a_batched_run_that_lost_its_lease_leaves_its_session_delivered(
    make_bus: Callable[..., Bus], monkeypatch: pytest.MonkeyPatch, batched: int
) -> None:
    b = make_bus()
    sids = [f"lost{i}" for i in range(batched)]
    for sid in sids:
        b.open_session(sid)
        b.turn(sid, "start")
    sent = [b.send({"from": "hosta:me", "to_id": sid, "text": "x"})["id"] for sid in sids]
    store = b.store
    real = store.delivery.begin_many

    def begin_then_lapse(ids: list[str], count: int, **options: Any) -> list[Any]:
        starts = real(ids, count, **options)
        # The batch stalls past its first lease's TTL (a loaded box): the lock lapses,
        # nobody else takes it, and the run finds its lease lost at its next fence.
        store.r.delete(store.k.s(ids[0], "lock"))
        return starts

    monkeypatch.setattr(store.delivery, "begin_many", begin_then_lapse)
    reports = deliver_many(b.delivery, sids)
    monkeypatch.setattr(store.delivery, "begin_many", real)
    # Every session delivered in this call: none left behind a cleared dispatch flag.
    for sid, msg_id, report in zip(sids, sent, reports, strict=True):
        assert not report.busy
        assert [n["messages"] for n in report.notices] == [1], sid
        assert store.queue.backlog(sid) == 0
        assert [n["notice"]["messages"] for n in b.floor.peek(sid)] == [[msg_id]]
        assert not store.r.exists(store.k.s(sid, "lock"))
