"""The bus with its store on a real 3-master Redis Cluster, end to end.

The store is the cluster (``INBOX_REDIS_CLUSTER=1``, ``INBOX_REDIS_URL`` naming one
node); the Celery broker stays the suite's standalone Redis, as in production.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from redis.cluster import RedisCluster
from redis.crc import key_slot

from bus.api import Bus
from bus.core.settings import Settings
from bus.delivery.dispatch import RecordingDispatcher
from bus.delivery.scheduler import sweep_backlogs, tick
from tests.support.kicks import pop_kicks
from tests.support.waiting import wait_for
from tests.support.worker_proc import WorkerProcess
from workers.app import make_app
from workers.dispatch import CeleryDispatcher

pytestmark = pytest.mark.slow


def node_of(b: Bus, sid: str) -> int:
    """Which third of the slots (which of the 3 masters) holds the session's keys."""
    return key_slot(b.store.k.s(sid, "session").encode()) * 3 // 16384


def test_settings_name_the_cluster_and_keep_the_broker_standalone(
    cluster_settings: Settings,
) -> None:
    env = cluster_settings.child_env()
    assert env["INBOX_REDIS_CLUSTER"] == "1"
    again = Settings.from_env(env)
    assert again.redis_cluster and again.redis_url == cluster_settings.redis_url
    assert again.celery_broker_url() == cluster_settings.broker_url
    with pytest.raises(ValueError, match="INBOX_BROKER_URL"):
        Settings(redis_url=cluster_settings.redis_url, redis_cluster=True).celery_broker_url()
    with pytest.raises(ValueError, match="INBOX_REDIS_URL"):
        Settings(redis_cluster=True).store_url()


def test_send_notice_read_through_a_real_worker_on_the_cluster(
    cluster_settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    start_worker(cluster_settings)
    b = Bus(cluster_settings, dispatcher=CeleryDispatcher(make_app(cluster_settings)))
    assert isinstance(b.store.r, RedisCluster)
    b.open_session("coord")
    b.open_session("lane-1")
    b.turn("coord", "start")
    sent = b.send(
        {"from": "hosta:lane", "from_session": "lane-1", "to_id": "coord", "text": "hello"}
    )
    again = b.send(
        {
            "id": sent["id"],
            "from": "hosta:lane",
            "from_session": "lane-1",
            "to_id": "coord",
            "text": "hello",
        }
    )
    assert again["duplicate"] is True
    # The message's thread is in another slot than the session: the delivery spans both.
    assert key_slot(b.store.k.t(sent["thread"], "meta").encode()) != key_slot(
        b.store.k.s("coord", "msgs").encode()
    )
    wait_for(lambda: b.floor.peek("coord"), what="the notice on the floor", timeout=30)
    notices = b.floor.peek("coord")
    assert len(notices) == 1 and notices[0]["kind"] == "notice"
    b.drain("coord")
    thread = b.read("coord", sent["thread"], mark_read=True)
    assert [m["id"] for m in thread["messages"]] == [sent["id"]]
    rows = b.threads("coord")["threads"]
    assert [r["threadId"] for r in rows] == [sent["thread"]]
    assert rows[0]["unread"] == 0
    # A reply marks what came since read (the thread's tail, read in the thread's slot;
    # the receipts stamped in the session's).
    more = b.send(
        {"from": "hosta:lane", "from_session": "lane-1", "to_id": "coord", "text": "and this"}
    )
    assert more["thread"] == sent["thread"]
    wait_for(
        lambda: more["id"] in b.store.inbox.reply_reads("coord", sent["thread"])[3], timeout=30
    )
    b.reply("coord", sent["thread"], "on it")
    assert b.receipt(more["id"], by="lane-1")["state"] == "read"
    # A withdraw reads in the session's slot, a decision the actor's and the thread's.
    assert b.withdraw(more["id"], by="lane-1")["state"] == "retracted"
    ask = b.request("coord", "task", "do it", actor="lane-1")
    assert b.decide(ask["thread"], "accept", actor="coord")["new_state"] == "CONFIRMED"


def test_watch_all_status_top_and_the_sweep_cross_the_cluster_nodes(
    cluster_settings: Settings,
) -> None:
    recorder = RecordingDispatcher()
    b = Bus(cluster_settings, dispatcher=recorder)
    sids = [f"w{i}" for i in range(9)]
    assert len({node_of(b, sid) for sid in sids}) == 3
    for sid in sids:
        b.open_session(sid)
    stop = threading.Event()
    seen: list[dict[str, Any]] = []
    stream = b.watch.subscribe(None, block_ms=200, stop=stop)
    for sid in sids:
        b.send({"from": "hosta:me", "to_id": sid, "text": f"to {sid}"})

    def follow() -> None:
        for event in stream:
            seen.append(event)
            if len(seen) == len(sids):
                stop.set()

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    reader.join(20)
    stop.set()
    assert sorted(e["session"] for e in seen) == sorted(sids)

    status = {row["session"]: row for row in b.status()["sessions"]}
    assert {sid: status[sid]["backlog"] for sid in sids} == dict.fromkeys(sids, 1)
    assert {r["session"]: r["backlog"] for r in b.watch.top_rows()} == dict.fromkeys(sids, 1)

    # Every session has a backlog and a dispatch flag still up; drop the flags (a lost
    # broker message) and the sweep kicks each session once, on every node.
    for sid in sids:
        b.store.queue.clear_pending(sid)
    recorder.calls.clear()
    assert sweep_backlogs(b.delivery) == len(sids)
    assert sorted(sid for _h, sid in recorder.calls) == sorted(sids)
    # The sweep's interval is claimed in the cluster: a second tick right after does not.
    tick(b.delivery)
    recorder.calls.clear()
    for sid in sids:
        b.store.queue.clear_pending(sid)
    assert tick(b.delivery)["swept"] == 0


def test_a_sentinel_broker_gets_its_master_name(cluster_settings: Settings) -> None:
    from dataclasses import replace

    env = replace(cluster_settings, broker_master_name="mymaster").child_env()
    app = make_app(Settings.from_env(env))
    assert app.conf.broker_transport_options["master_name"] == "mymaster"
    assert "master_name" not in make_app(cluster_settings).conf.broker_transport_options


def test_a_dead_loops_kicks_are_reclaimed_on_the_cluster(cluster_settings: Settings) -> None:
    # The reclaim read its clock in a pipeline with the beats, which a cluster refuses
    # (TIME has no key): a dead loop's kicks stayed taken until the sweep.
    store = Bus(cluster_settings, dispatcher=RecordingDispatcher()).store
    host = cluster_settings.host
    store.r.rpush(store.k.kick_list(host), "a", "b")
    store.delivery.kick_beat(host, "l1", 3000)
    client, pool = store.delivery.kick_client(0.1, "test-kick")
    try:
        assert pop_kicks(store, client, host, "l1", 0.1, 2) == ["a", "b"]
    finally:
        if pool is not None:
            pool.disconnect()
    assert store.delivery.reclaim_kicks(host, 60_000) == 0  # alive: left alone
    store.r.hset(store.k.kick_loops(host), "l1", 0)  # its beat long gone
    assert store.delivery.reclaim_kicks(host, 60_000) == 2
    assert store.r.lrange(store.k.kick_list(host), 0, -1) == ["a", "b"]


@pytest.mark.timeout(240)  # a worker's boot on a busy machine, then the stall bound
def test_inbox_up_restarts_a_stalled_worker_when_its_store_is_the_cluster(
    cluster_settings: Settings, tmp_path: Path
) -> None:
    # The supervisor read the host queue and the beat with a plain client on the store's
    # URL: on a cluster the queue is the broker's and the beat answered MOVED, so a hung
    # worker was never restarted.
    env = {**cluster_settings.child_env(), "INBOX_WORKER_STALL_S": "2"}
    log = tmp_path / "up.log"
    with open(log, "wb") as out:
        up = subprocess.Popen(
            [sys.executable, "-m", "bus.surfaces.cli.app", "up", "--concurrency", "1"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    store = Bus(cluster_settings, dispatcher=RecordingDispatcher()).store
    beat, host = store.k.beat(cluster_settings.host), cluster_settings.host
    try:
        got = wait_for(lambda: store.r.hmget(beat, "started", "pid")[0], 120, "the worker ready")
        assert got
        pid = int(store.r.hget(beat, "pid"))
        os.killpg(os.getpgid(pid), signal.SIGSTOP)  # alive, and no progress
        # On the broker. A read the worker had waiting when it was stopped still takes
        # one task off the queue (the server answers it); the second stays queued.
        dispatcher = CeleryDispatcher(make_app(cluster_settings))
        dispatcher.request(host, "nobody")
        dispatcher.request(host, "nobody-else")
        wait_for(
            lambda: int(store.r.hget(beat, "pid") or pid) != pid,
            60,
            "the stalled worker's restart",
        )
        assert "made no progress" in log.read_text()
    finally:
        os.killpg(up.pid, signal.SIGINT)
        try:
            up.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait(10)


def test_a_waited_send_outlasting_a_read_timeout_ends_with_its_own_timeout(
    cluster_settings: Settings,
) -> None:
    # A cluster client's reads time out after 5 s: a longer wait ended RedisUnavailable.
    b = Bus(cluster_settings, dispatcher=RecordingDispatcher())
    b.open_session("quiet")
    started = time.monotonic()
    got = b.send({"from": "hosta:me", "to_id": "quiet", "text": "q?"}, wait=True, timeout=7)
    assert got["state"] == "error" and got["error"] == "timeout", got
    assert time.monotonic() - started >= 7
