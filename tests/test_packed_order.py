"""A pipeline sent packed in its order (``Store.execute_in_order``, the batch's notice
records): a script the server lost (a restart, ``SCRIPT FLUSH``) still runs where it was
queued, before the commands after it, as the pipeline itself runs it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from bus.api import Bus
from bus.dispatch import RecordingDispatcher
from bus.embedded import EmbeddedRedis
from bus.settings import Settings


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
    store.script("unlock")  # registered: its SHA is what the pipeline sends
    store.r.script_flush()
    pipe = store.pipeline()
    store.script("unlock")(keys=[lock], args=["tok"], client=pipe)
    pipe.get(lock)  # after the unlock: gone
    pipe.hset(store.k.s("s1", "probe"), mapping={"a": "1", "b": "2"})
    assert store.execute_in_order(pipe) == [1, None, 2]
    assert pipe.command_stack == [] and not pipe.scripts  # sent, as execute() leaves it


def test_an_error_reply_is_raised_after_the_rest_ran(bus: Bus) -> None:
    store = bus.store
    key = store.k.s("s1", "probe")
    store.r.set(key, "text")
    pipe = store.pipeline()
    pipe.hset(key, mapping={"a": "1"})  # WRONGTYPE
    pipe.set(store.k.s("s1", "after"), "1")
    with pytest.raises(redis.ResponseError):
        store.execute_in_order(pipe)
    assert store.r.get(store.k.s("s1", "after")) == "1"
