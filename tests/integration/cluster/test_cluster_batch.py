"""The store's ordered batch (``Store.pipeline()``) on every backend, and on a cluster its
one pipeline per node (bus/store/cluster.py ``OrderedBatch``, ``run_commands``): replies in
the queued order, a script seeing the writes queued before it, a lost script loaded
again, a command a node answers ``MOVED`` run again where its slot is."""

# ruff: noqa: F811  (the store fixture, imported from tests.support.store_backends)
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis
import redis.connection

from bus.store.cluster_reach import ClusterUnreachable
from bus.store.outage_log import OUTAGE_ERRORS
from bus.store.store import Store
from tests.support.store_backends import SIDS, store  # noqa: F401  (the fixture)


def lock(s: Store, sid: str) -> str:
    return s.k.s(sid, "lock")


def queue_script(s: Store, pipe: Any, sid: str, token: str) -> None:
    """``extend_lock.lua``: 1 if the lock holds ``token`` (its TTL set again), else 0."""
    s.run("extend_lock", sid, ("lock", "again"), [token, 5000], client=pipe)


# Each case: what is queued, per session (sid, store, pipe), and the replies it answers.
CASES: dict[str, tuple[Callable[[Store, Any, str], None], list[Any]]] = {
    "a script sees the write queued before it": (
        lambda s, p, sid: (p.set(lock(s, sid), "me"), queue_script(s, p, sid, "me")),
        [True, 1],
    ),
    "a script sees the delete queued before it": (
        lambda s, p, sid: (
            p.set(lock(s, sid), "me"),
            p.delete(lock(s, sid)),
            queue_script(s, p, sid, "me"),
        ),
        [True, 1, 0],
    ),
    "a read after a script sees what it left": (
        lambda s, p, sid: (
            p.set(lock(s, sid), "me"),
            queue_script(s, p, sid, "me"),
            p.pttl(lock(s, sid)),
        ),
        [True, 1, "ttl"],
    ),
    "plain commands only": (
        lambda s, p, sid: (p.hset(s.k.s(sid, "h"), "f", "v"), p.hget(s.k.s(sid, "h"), "f")),
        [1, "v"],
    ),
    "a reply parsed as redis-py parses it": (
        lambda s, p, sid: (
            p.zadd(s.k.s(sid, "z"), {"a": 1}),
            p.zrange(s.k.s(sid, "z"), 0, -1, withscores=True),
        ),
        [1, [("a", 1.0)]],
    ),
}


def replies_of(got: list[Any]) -> list[Any]:
    return ["ttl" if isinstance(r, int) and r > 1000 else r for r in got]


@pytest.mark.parametrize("case", list(CASES))
def test_a_batch_answers_in_the_queued_order_on_every_node(store: Store, case: str) -> None:
    queue, expected = CASES[case]
    pipe = store.pipeline()
    for sid in SIDS:  # over every node of the cluster
        queue(store, pipe, sid)
    assert replies_of(pipe.execute()) == expected * len(SIDS)


def test_a_batch_raises_its_first_error_after_running_the_rest(store: Store) -> None:
    pipe = store.pipeline()
    pipe.set(lock(store, SIDS[0]), "x")
    pipe.hget(lock(store, SIDS[0]), "f")  # WRONGTYPE
    pipe.set(lock(store, SIDS[1]), "y")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        pipe.execute()
    assert store.r.get(lock(store, SIDS[1])) == "y"


def cluster_only(s: Store) -> None:
    if not s.cluster:
        pytest.skip("a standalone server's pipeline is redis-py's own")


def test_a_batch_on_a_cluster_is_one_pipeline_a_node(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster_only(store)
    sids = [f"{sid}-{n}" for sid in SIDS for n in range(5)]
    warm = store.pipeline()
    for sid in sids:  # each node's connection made (its handshake is round trips too)
        queue_script(store, warm, sid, "me")
    warm.execute()
    sent: list[int] = []
    real = redis.connection.AbstractConnection.send_packed_command

    def counted(conn: Any, command: Any, check_health: bool = True) -> None:
        sent.append(1)
        real(conn, command, check_health)

    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counted)
    pipe = store.pipeline()
    for sid in sids:
        pipe.set(lock(store, sid), "me")
        queue_script(store, pipe, sid, "me")
        pipe.get(lock(store, sid))
    assert pipe.execute() == [True, 1, "me"] * len(sids)
    assert len(sent) == 3  # one a node, not one a script


def wrong_node(s: Store, key: str) -> None:
    """Point the cluster client's slot map for ``key`` at a node that does not serve it,
    as a client that has not yet seen a slot move: that node answers ``MOVED``."""
    nodes = s.r.nodes_manager
    slot = s.r.keyslot(key)
    right = nodes.get_node_from_slot(slot)
    nodes.slots_cache[slot] = [n for n in s.r.get_primaries() if n.name != right.name][:1]


def test_a_command_a_node_answers_moved_runs_again_where_its_slot_is(store: Store) -> None:
    cluster_only(store)
    moved, other = SIDS[0], SIDS[1]
    wrong_node(store, lock(store, moved))
    pipe = store.pipeline()
    pipe.set(lock(store, other), "me")
    pipe.set(lock(store, moved), "me")
    queue_script(store, pipe, moved, "me")
    pipe.get(lock(store, moved))
    queue_script(store, pipe, other, "me")
    assert pipe.execute() == [True, True, 1, "me", 1]
    store.r.nodes_manager.initialize()
    assert store.r.get(lock(store, moved)) == "me"


def test_a_script_lost_where_a_moved_call_runs_again_is_loaded_there(store: Store) -> None:
    cluster_only(store)
    sid = SIDS[2]
    store.r.script_flush()  # every node forgets every script (a restart would)
    wrong_node(store, lock(store, sid))  # the wrong node loads it at its pipeline's head
    pipe = store.pipeline()
    pipe.set(lock(store, sid), "me")
    queue_script(store, pipe, sid, "me")
    queue_script(store, pipe, sid, "you")
    assert pipe.execute() == [True, 1, 0]


def test_independent_script_calls_a_node_answers_moved_run_again_where_their_slot_is(
    store: Store,
) -> None:
    cluster_only(store)
    for sid in SIDS[:3]:
        store.r.set(lock(store, sid), "me")
    wrong_node(store, lock(store, SIDS[0]))
    calls = [
        store.script_call("extend_lock", list(store.k.s_many(sid, ("lock", "again"))), ["me", 1000])
        for sid in SIDS
    ]
    assert store.run_scripts(calls) == [1] * 3 + [0] * (len(SIDS) - 3)


def _move_slot(s: Store, slot: int, src: Any, dst: Any, *, finish: bool = True) -> None:
    """Move ``slot`` from node ``src`` to ``dst`` as ``redis-cli --cluster reshard`` does:
    IMPORTING/MIGRATING, then (``finish``) its keys MIGRATEd and the slot given to ``dst``
    on every master."""
    a, b = s.r.get_redis_connection(src), s.r.get_redis_connection(dst)
    a_id, b_id = a.execute_command("CLUSTER MYID"), b.execute_command("CLUSTER MYID")
    b.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", a_id)
    a.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", b_id)
    if not finish:
        return
    keys = a.execute_command("CLUSTER GETKEYSINSLOT", slot, 1000)
    if keys:
        a.execute_command("MIGRATE", dst.host, dst.port, "", 0, 5000, "KEYS", *keys)
    for node in s.r.get_primaries():
        s.r.get_redis_connection(node).execute_command("CLUSTER SETSLOT", slot, "NODE", b_id)


def test_a_batch_during_and_after_a_slot_migration_answers_in_order(store: Store) -> None:
    cluster_only(store)
    moving, still = SIDS[3], SIDS[4]
    slot = store.r.keyslot(lock(store, moving))
    src = store.r.nodes_manager.get_node_from_slot(slot)
    dst = next(n for n in store.r.get_primaries() if n.name != src.name)
    # On src, both of the script's keys: it runs there during the move (with one of them
    # moved or missing the node would answer TRYAGAIN until the move is done).
    store.r.set(lock(store, moving), "me")
    store.r.set(store.k.s(moving, "again"), "1")
    try:
        _move_slot(store, slot, src, dst, finish=False)
        pipe = store.pipeline()
        pipe.set(store.k.s(moving, "cursor"), "1-0")  # new: ASK, written on dst
        queue_script(store, pipe, moving, "me")  # its keys on src: runs there
        pipe.get(store.k.s(moving, "cursor"))  # ASK: read on dst
        pipe.set(lock(store, still), "me")
        assert pipe.execute() == [True, 1, "1-0", True]
        _move_slot(store, slot, src, dst)  # done: src answers MOVED for the slot
        pipe = store.pipeline()
        queue_script(store, pipe, moving, "me")
        pipe.get(store.k.s(moving, "cursor"))
        queue_script(store, pipe, still, "me")
        assert pipe.execute() == [1, "1-0", 1]
    finally:
        node = store.r.nodes_manager.get_node_from_slot(slot)
        if node.name != src.name:
            _move_slot(store, slot, node, src)  # back where it was, for the other tests
        store.r.nodes_manager.initialize()


def test_a_blocking_reads_own_cluster_client_is_named_and_outlasts_its_block(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster_only(store)
    from redis.cluster import ClusterNode

    from bus.store.cluster import own_cluster_client

    key = lock(store, SIDS[0])
    own, pools = own_cluster_client(store.r, socket_timeout=70.0, name="inbox-wait:m1")
    try:
        assert own.blpop([key], timeout=0.1) is None
        node = own.get_node_from_key(key)
        conn = own.get_redis_connection(node).connection_pool.get_connection()
        assert conn.socket_timeout == 70.0
        own.get_redis_connection(node).connection_pool.release(conn)
        names = [c.get("name") for c in store.r.client_list(target_nodes=node)]
        assert "inbox-wait:m1" in names
    finally:
        pools.disconnect()
    # No node answering is an outage (what a delivery loop waits out), not a crash.
    monkeypatch.setattr(store.r, "get_nodes", lambda: [ClusterNode("127.0.0.1", 1)])
    with pytest.raises(OUTAGE_ERRORS) as got:
        own_cluster_client(store.r, socket_timeout=70.0, name="inbox-wait:m2")
    assert isinstance(got.value, ClusterUnreachable)
