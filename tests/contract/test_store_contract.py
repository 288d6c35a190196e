"""The storage contract of what every aggregate of the store shares (the core: the client,
the pipelines, the scripts, the round trips) and of the reads that cross aggregates, held
against every backend (a standalone Redis, a Redis Cluster and fakeredis:
tests/support/store_backends.py). Each aggregate has its own suite beside this one:
``tests/contract/test_store_<aggregate>.py``.
"""

# ruff: noqa: F811  (the store fixture, imported from tests.support.store_backends)
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import redis
from redis.crc import key_slot

from bus.core.errors import Unavailable
from bus.store.cluster import OrderedBatch, read_streams
from bus.store.keys import Keys
from bus.store.store import Store
from tests.support.store_backends import SIDS, store  # noqa: F401  (the fixture)


def test_the_sessions_used_here_span_several_cluster_nodes() -> None:
    # 3 masters split 16384 slots in thirds; the contract's sessions must reach all three.
    k = Keys("p")
    assert len({key_slot(k.s(sid, "session").encode()) * 3 // 16384 for sid in SIDS}) == 3


def test_ping_answers(store: Store) -> None:
    store.ping()


def test_ping_of_a_server_that_does_not_answer_is_unavailable() -> None:
    dead = Store(redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2), Keys("p"))
    with pytest.raises(Unavailable):
        dead.ping()


def test_a_missing_session_reads_empty(store: Store) -> None:
    assert store.sessions.get_session("nobody") is None
    assert store.sessions.session_ids() == [] and store.sessions.sessions() == []
    assert store.sessions.sessions_by_handle("h:none") == []
    assert (
        store.queue.first_answer("nobody", "m1") is None and store.queue.recipient_of("m1") is None
    )
    assert store.queue.cursor("nobody") == "0-0" and store.queue.backlog("nobody") == 0
    assert store.queue.read_after("nobody", "0-0") == [] and store.queue.rawflight("nobody") is None
    assert store.schedule.next_due() is None


def test_a_pipeline_runs_scripts_and_commands_in_order_across_slots(store: Store) -> None:
    pipe = store.pipeline()
    for sid in SIDS[:6]:
        store.run("extend_lock", sid, ("lock",), ["nobody", 1000], client=pipe)
        pipe.set(store.k.s(sid, "cursor"), "5-0")
        pipe.get(store.k.s(sid, "cursor"))
    replies = pipe.execute()
    assert replies == [0, True, "5-0"] * 6
    if store.cluster:
        assert isinstance(pipe, OrderedBatch)


def test_a_pipeline_script_is_loaded_again_on_a_node_that_lost_it(store: Store) -> None:
    if not store.cluster:
        pytest.skip("the standalone server is shared with other tests: no SCRIPT FLUSH there")
    store.r.script_flush()  # every node forgets every script (a restart would)
    pipe = store.pipeline()
    for sid in SIDS:
        store.run("extend_lock", sid, ("lock",), ["nobody", 1000], client=pipe)
    assert pipe.execute() == [0] * len(SIDS)
    store.r.script_flush()
    assert [store.delivery.extend_lock(sid, "nobody") for sid in SIDS] == [False] * len(SIDS)


def test_independent_scripts_on_a_cluster_go_as_one_pipeline_a_node(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not store.cluster:
        pytest.skip("the standalone server is shared with other tests: no SCRIPT FLUSH there")
    sids = [f"{sid}-{n}" for sid in SIDS for n in range(10)]  # over every node
    for sid in sids[:5]:
        store.r.set(store.k.s(sid, "lock"), "me")
    store.r.script_flush()  # loaded again at each node's head
    sent: list[int] = []
    real = store.r.get_redis_connection

    def connection(node: object) -> object:
        sent.append(1)
        return real(node)

    monkeypatch.setattr(store.r, "get_redis_connection", connection)
    calls = [
        store.script_call("extend_lock", list(store.k.s_many(sid, ("lock", "again"))), ["me", 1000])
        for sid in sids
    ]
    assert store.run_scripts(calls) == [1] * 5 + [0] * (len(sids) - 5)  # in order
    assert len(sent) <= 3  # one pipeline a node, not a round trip a call


def test_reading_many_streams_answers_each_after_its_position(store: Store) -> None:
    for sid in SIDS:
        store.queue.append(sid, f"{sid}-a", "{}", "{}")
    positions = {store.k.s(sid, "stream"): "0-0" for sid in SIDS}
    got = read_streams(store.r, positions, count=10, block_ms=100, stop=threading.Event())
    assert {key: [f["id"] for _e, f in entries] for key, entries in got} == {
        store.k.s(sid, "stream"): [f"{sid}-a"] for sid in SIDS
    }
    latest = {key: entries[-1][0] for key, entries in got}
    assert read_streams(store.r, latest, count=10, block_ms=50, stop=threading.Event()) == []


def test_a_quiet_read_of_many_streams_on_a_cluster_backs_off(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Polled every POLL_S for a second, a quiet watch of 100 lanes was 2,000 XRANGEs a second.
    if not store.cluster:
        pytest.skip("a standalone server answers one blocking XREAD")
    from bus.store import cluster

    reads: list[int] = []
    real = store.r.pipeline

    def pipeline(**kw: object) -> object:
        reads.append(1)
        return real(**kw)

    monkeypatch.setattr(store.r, "pipeline", pipeline)
    positions = {store.k.s(sid, "stream"): "0-0" for sid in SIDS}
    poll = cluster.Poll()
    quiet: dict[str, Any] = {"count": 10, "block_ms": 1000, "stop": threading.Event(), "poll": poll}
    assert read_streams(store.r, positions, **quiet) == []
    # 0.05 + 0.1 + 0.2 + 0.4 + the rest (0.25): six reads, not 1 + 1 / POLL_S.
    assert len(reads) <= 6 < 1 + 1 / cluster.POLL_S
    del reads[:]
    # The next quiet second goes on at POLL_MAX_S: 0.4 + 0.4 + 0.2.
    assert read_streams(store.r, positions, **quiet) == []
    assert len(reads) <= 3
    store.queue.append(SIDS[0], "one", "{}", "{}")
    got = read_streams(store.r, positions, **quiet)
    assert [f["id"] for _k, entries in got for _e, f in entries] == ["one"]
    assert poll.wait == cluster.POLL_MAX_S / 2  # heard after the longest wait: half of it


@pytest.mark.parametrize(
    ("wait", "heard", "then"),
    [
        (0.05, False, 0.1),  # quiet: twice as long
        (0.4, False, 0.4),  # not past POLL_MAX_S
        (0.4, True, 0.2),  # heard: half as long
        (0.1, True, 0.05),
        (0.05, True, 0.05),  # not below POLL_S: read again at once
    ],
)
def test_a_cluster_watch_s_next_wait(wait: float, heard: bool, then: float) -> None:
    from bus.store.cluster import POLL_MAX_S, POLL_S, next_wait

    assert (POLL_S, POLL_MAX_S) == (0.05, 0.4)
    assert next_wait(wait, heard) == then


def test_a_watch_heard_every_so_often_settles_near_that_interval() -> None:
    # A lane message every 0.25 s: the reads between two hits (each read after a wait of
    # poll.wait, doubled at each miss) fall from ~4 to ~1-2, as read_streams runs them.
    from bus.store.cluster import POLL_S, next_wait

    def reads_per_hit(after_hit: Callable[[float], float]) -> float:
        wait, clock, reads, hits, next_at = POLL_S, 0.0, 0, 0, 0.25
        while clock < 60:
            clock += wait
            reads += 1
            if clock >= next_at:
                hits += 1
                next_at = clock + 0.25
                wait = after_hit(wait)
            else:
                wait = next_wait(wait, heard=False)
        return reads / hits

    assert reads_per_hit(lambda w: next_wait(w, heard=True)) < 2.5
    assert reads_per_hit(lambda _w: POLL_S) >= 3  # started again at POLL_S each time


# -- the batched dispatch reads (bus/store/queue.py) and threads' parties (bus/store/inbox.py) --


def test_batched_reads_answer_in_order_and_missing_reads_empty(store: Store) -> None:
    assert store.queue.session_hosts(["nobody", "noone"]) == [None, None]
    store.r.hset(store.k.s("here", "session"), "host", "h1")
    assert store.queue.session_hosts(["nobody", "here", "noone"]) == [None, "h1", None]
    store.r.hset(store.k.s("there", "session"), "host", "h2")
    # Hosts and dispatch flags of a due burst: the flags only where a session exists.
    assert store.queue.hosts_flagged(["nobody", "there", "here"]) == [None, "h2", "h1"]
    assert store.r.get(store.k.s("there", "pending")) == "1"
    assert 0 < store.r.pttl(store.k.s("here", "pending")) <= store.lock_ttl_ms
    assert not store.r.exists(store.k.s("nobody", "pending"))
    assert store.queue.hosts_flagged([]) == []
    assert store.inbox.thread_parties_many(["thr_a", "thr_b"]) == [(None, False), (None, False)]
    store.queue.flag_dispatched(["s1", "s2"])  # sessions in different slots on a cluster
    assert store.r.get(store.k.s("s1", "pending")) == "1"
    assert 0 < store.r.pttl(store.k.s("s2", "pending")) <= store.lock_ttl_ms


def test_every_script_loads_whole_and_every_part_is_included() -> None:
    # A step two scripts run is written once (bus/store/lua/parts); Redis gets plain scripts.
    from bus.store.lua_files import LUA_DIR, lua_source

    used: set[str] = set()
    for path in sorted(LUA_DIR.glob("*.lua")):
        raw = path.read_text()
        used.update(line.split()[1] for line in raw.splitlines() if line.startswith("--@include"))
        text = lua_source(path.stem)
        assert "--@include" not in text, path.name
        assert text.startswith(f"-- {path.name}:"), path.name  # headed by its own comment
    parts = {p.stem for p in (LUA_DIR / "parts").glob("*.lua")}
    assert used == parts
    assert "local function snapshot(" in lua_source("delivery_begin")
