"""Calls sent packed in their order (``Store.run_in_order``, the batch's notice records):
a script the server lost (a restart, ``SCRIPT FLUSH``) still runs where it was queued,
before the commands after it, as a redis-py pipeline runs it; and the send's pipeline
(``Store.execute_loaded``), which sends no script source: its one script, lost, is loaded
and run once more."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import redis

from bus.api import Bus
from bus.core.errors import RateLimited
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


def _send_bus(
    own_redis: EmbeddedRedis, tmp_path: Path, prefix: str
) -> tuple[Bus, RecordingDispatcher]:
    d = RecordingDispatcher()
    s = Settings(home=tmp_path, host="hosta", redis_url=own_redis.url, key_prefix=prefix)
    b = Bus(s, dispatcher=d)
    b.open_session("rcv")
    b.open_session("snd")
    return b, d


def _send(b: Bus, mid: str) -> dict[str, object]:
    return b.send(
        {"id": mid, "from": "hosta:snd", "from_session": "snd", "to_id": "rcv", "text": "hi"}
    )


def test_a_send_sends_no_script_source_and_a_server_that_lost_it_runs_the_append_once_more(
    own_redis: EmbeddedRedis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    b, dispatched = _send_bus(own_redis, tmp_path, "snd1")
    store = b.store
    sent: list[list[tuple[object, ...]]] = []
    real = store.run_packed
    monkeypatch.setattr(store, "run_packed", lambda cmds: (sent.append(cmds), real(cmds))[1])
    _send(b, "warm")  # loads the scripts where an earlier test flushed them
    sent.clear()
    _send(b, "one")
    assert all(c[0] != "SCRIPT" for batch in sent for c in batch), sent
    assert [c[0] for c in sent[0]].count("EVALSHA") == 1  # the append opens the receipt
    sent.clear()
    store.r.script_flush()  # a restart without a dropped connection
    store.r.delete(store.k.s("rcv", "pending"))  # no delivery pending: this send asks one
    before = len(dispatched.calls)
    answer = _send(b, "two")
    assert answer["state"] == "stored" and not answer.get("duplicate")
    # Lost: the append alone loaded and run once more (the writes around it ran).
    assert len(sent) == 2 and [c[0] for c in sent[1]] == ["SCRIPT", "EVALSHA"]
    assert sent[1][1] == next(c for c in sent[0] if c[0] == "EVALSHA")
    assert dispatched.calls[before:] == [("hosta", "rcv")]
    ids = store.k.s("rcv", "ids")
    assert store.r.hexists(ids, "~two")  # the sender's receipt opened
    assert store.r.xlen(store.k.s("rcv", "stream")) == 3  # each stored once


def test_a_send_opens_its_receipt_in_the_append_once_and_a_resend_keeps_it(
    own_redis: EmbeddedRedis, tmp_path: Path
) -> None:
    b, _dispatched = _send_bus(own_redis, tmp_path, "snd2")
    store = b.store
    ids, bounced = store.k.s("rcv", "ids"), store.k.receipt("rcv", "one")
    store.r.hset(bounced, mapping={"from": "hosta:snd", "bounced": "1"})  # gives way
    _send(b, "one")
    receipt = json.loads(store.r.hget(ids, "~one"))
    assert receipt["from"] == "hosta:snd" and receipt["from_session"] == "snd"
    assert isinstance(receipt["stored"], int) and "thread" not in receipt  # the answer's
    assert not store.r.exists(bounced)
    assert _send(b, "one")["duplicate"] is True
    assert json.loads(store.r.hget(ids, "~one")) == receipt  # kept as it was
    store.r.hdel(ids, "~one")  # an id stored before receipts: its resend opens one
    _send(b, "one")
    assert json.loads(store.r.hget(ids, "~one"))["from_session"] == "snd"


def test_a_refused_send_opens_no_receipt(own_redis: EmbeddedRedis, tmp_path: Path) -> None:
    b, _dispatched = _send_bus(own_redis, tmp_path, "snd3")
    b = Bus(replace(b.settings, max_unread=1), dispatcher=RecordingDispatcher())
    _send(b, "one")
    with pytest.raises(RateLimited):
        _send(b, "two")
    assert not b.store.r.hexists(b.store.k.s("rcv", "ids"), "~two")
    assert b.store.r.hexists(b.store.k.s("rcv", "ids"), "~one")
