"""Calls sent packed in their order (``Store.run_in_order``, the batch's notice records):
a script the server lost (a restart, ``SCRIPT FLUSH``) still runs where it was queued,
before the commands after it, as a redis-py pipeline runs it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from bus.api import Bus
from bus.core.settings import Settings
from bus.delivery.dispatch import RecordingDispatcher
from bus.ops.embedded import EmbeddedRedis


@pytest.fixture(scope="module")
def own_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    """A private server: the test flushes its scripts (the shared one's are others')."""
    tmp = tmp_path_factory.mktemp("packed")
    with EmbeddedRedis(tmp / "r.sock", tmp / "data", persist=False) as server:
        yield server


def test_a_lost_script_runs_in_its_place_and_the_replies_are_raw(
    own_redis: EmbeddedRedis, tmp_path: Path
) -> None:
    s = Settings(home=tmp_path, host="hosta", redis_url=own_redis.url, key_prefix="o")
    store = Bus(s, dispatcher=RecordingDispatcher()).store
    lock = store.k.s("s1", "lock")
    store.r.set(lock, "tok")
    unlock = store.script_call("unlock", [lock], ["tok"])  # registered: its SHA is sent
    store.r.script_flush()
    calls = [unlock, ("GET", lock), ("HSET", store.k.s("s1", "probe"), "a", "1", "b", "2")]
    assert store.run_in_order(calls) == [1, None, 2]  # the GET after the unlock: gone


def test_an_error_reply_is_raised_after_the_rest_ran(bus: Bus) -> None:
    store = bus.store
    key = store.k.s("s1", "probe")
    store.r.set(key, "text")
    calls = [("HSET", key, "a", "1"), ("SET", store.k.s("s1", "after"), "1")]  # WRONGTYPE first
    with pytest.raises(redis.ResponseError):
        store.run_in_order(calls)
    assert store.r.get(store.k.s("s1", "after")) == "1"
