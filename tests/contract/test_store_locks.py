"""The delivery aggregate's locks: one holder, the lease, many at once, the hand-off flag
(bus/store/locks.py), held
to its contract on every backend (a standalone Redis and a Redis Cluster:
tests/support/store_backends.py)."""

# ruff: noqa: F811  (the store fixture, imported from tests.support.store_backends)
from __future__ import annotations

import pytest
import redis

from bus.core.errors import Unavailable
from bus.store.keys import Keys
from bus.store.redis_errors import StoreFailed
from bus.store.store import Store
from tests.support.store_backends import SIDS, info, store  # noqa: F401  (the fixture)


def test_the_lock_has_one_holder_and_only_its_token_releases_it(store: Store) -> None:
    token = store.delivery.lock("s5")
    assert token is not None and store.delivery.lock("s5") is None
    assert store.delivery.extend_lock("s5", token) is True
    assert store.delivery.extend_lock("s5", "not-the-token") is False
    store.delivery.unlock("s5", "not-the-token")
    assert store.delivery.lock("s5") is None
    store.delivery.unlock("s5", token)
    assert store.delivery.lock("s5") is not None


def test_many_locks_extend_and_unlock_in_one_call_across_slots(store: Store) -> None:
    tokens = {sid: store.delivery.lock(sid) for sid in SIDS}
    assert all(tokens.values())
    held = [(sid, str(tokens[sid])) for sid in SIDS]
    assert store.delivery.extend_many(held) == [True] * len(SIDS)
    assert store.delivery.extend_many([(SIDS[0], "not-the-token")]) == [False]
    store.delivery.ask_again(SIDS[1], 2000)
    agains = store.delivery.unlock_many(held)
    assert agains == [sid == SIDS[1] for sid in SIDS]  # the hand-off flag taken with it
    assert all(store.delivery.lock(sid) is not None for sid in SIDS)  # every lock freed


def test_the_unlock_takes_the_hand_off_flag_in_the_same_call(store: Store) -> None:
    token = store.delivery.lock("s1")
    assert token is not None
    store.delivery.ask_again("s1", 2000)
    assert store.delivery.unlock_and_take_again("s1", token) is True
    assert not store.delivery.take_again("s1") and store.delivery.lock("s1") is not None


def test_a_lock_write_to_a_server_that_does_not_answer_is_the_stores_own_error() -> None:
    dead = Store(redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2), Keys("p"))
    with pytest.raises(Unavailable) as caught:
        dead.delivery.extend_lock("s1", "t")
    assert isinstance(caught.value, StoreFailed)
    with pytest.raises(StoreFailed):
        dead.delivery.extend_many([("s1", "t")])
