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


def test_a_last_lone_script_is_loaded_only_when_the_server_lost_it(
    own_redis: EmbeddedRedis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = Settings(home=tmp_path, host="hosta", redis_url=own_redis.url, key_prefix="l")
    store = Bus(s, dispatcher=RecordingDispatcher()).store
    lock, probe = store.k.s("s1", "lock"), store.k.s("s1", "probe")
    sent: list[list[tuple[object, ...]]] = []
    real = store.run_packed
    monkeypatch.setattr(store, "run_packed", lambda cmds: (sent.append(cmds), real(cmds))[1])
    # The notice's records: a plain command, then the one script.
    store.r.set(lock, "tok")
    calls = [("SET", probe, "1"), store.script_call("unlock", [lock], ["tok"])]
    store.r.script_load(store._sources[calls[1][1]])
    assert store.run_in_order(calls) == ["OK", 1]
    assert [c[0] for c in sent[0]] == ["SET", "EVALSHA"]  # no source sent along
    # Lost (a restart, SCRIPT FLUSH): the SET ran, then the script once loaded.
    sent.clear()
    store.r.set(lock, "tok")
    store.r.script_flush()
    assert store.run_in_order(calls) == ["OK", 1]
    assert not store.r.exists(lock)
    assert [c[0] for c in sent[-1]] == ["SCRIPT", "EVALSHA"]
