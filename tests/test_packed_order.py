"""A pipeline sent packed in its order (``Store.execute_in_order``, the batch's notice
records): a script the server lost (a restart, ``SCRIPT FLUSH``) still runs where it was
queued, before the commands after it, as the pipeline itself runs it."""

from __future__ import annotations

import pytest
import redis

from bus.api import Bus


def test_a_lost_script_runs_in_its_place_and_the_replies_are_raw(bus: Bus) -> None:
    store = bus.store
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
