"""Many sessions delivered as one batch (bus.delivery.engine): the routing rules, the counters
summed, due wakes each delivered once in process and through a worker's kick loop."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

import pytest

from bus.api import Bus
from bus.core.clock import ManualClock
from bus.core.models import SessionInfo
from bus.core.settings import Settings
from bus.delivery.dispatch import RecordingDispatcher
from bus.delivery.engine import deliver_many, left_over
from bus.delivery.take import BATCH
from bus.telemetry.metrics import summed
from tests.support.celery_bus import Scheduler, events
from tests.support.kicks import pop_kicks
from tests.support.sessions import idle_with_blockers
from tests.support.waiting import wait_for
from tests.support.worker_proc import WorkerProcess


def info(wake_cmd: str | None = None) -> SessionInfo:
    return SessionInfo(session="s", handle="s", host="h", state="idle", wake_cmd=wake_cmd)


@pytest.mark.parametrize(
    ("inf", "nid", "floor", "marks", "left"),
    [
        (info(), "ntc-1", [], False, True),  # a notice a crash left: recover it
        (info(), None, ["ntc-2"], False, True),  # floor notices to sweep
        (info(), None, [], True, True),  # drain marks waiting on the floor
        # A wake whose worker died before its command ran: run it now.
        (info().model_copy(update={"wake_pending": "ntc-1"}), None, [], False, True),
        (info(), None, [], False, False),  # nothing left: the snapshot's view stands
        (info("echo hi"), None, [], False, False),  # a wake command alone leaves nothing
    ],
)
def test_what_an_earlier_run_left_is_settled_before_the_plan(
    inf: SessionInfo, nid: str | None, floor: list[str], marks: bool, left: bool
) -> None:
    assert left_over(inf, nid, floor, marks) is left


@pytest.mark.parametrize(
    ("writes", "out"),
    [
        ([], []),
        ([("metrics", "a", 1)], [("metrics", "a", 1)]),
        (
            [("metrics", "a", 1), ("latency", "sum", 0.5), ("metrics", "a", 2)],
            [("metrics", "a", 3), ("latency", "sum", 0.5)],
        ),
        (
            [("latency", "sum", 0.25), ("latency", "sum", 0.5), ("metrics", "b", 1)],
            [("latency", "sum", 0.75), ("metrics", "b", 1)],
        ),
        ([("metrics", "a", 1), ("latency", "a", 1)], [("metrics", "a", 1), ("latency", "a", 1)]),
    ],
)
def test_a_batch_counts_each_counter_once(
    writes: list[tuple[str, str, float]], out: list[tuple[str, str, float]]
) -> None:
    assert summed(writes) == out


def test_due_wakes_delivered_as_one_batch_each_wake_once(make_bus: Callable[..., Bus]) -> None:
    clock = ManualClock(int(time.time() * 1000))  # the plan's now, moved by the test
    b = make_bus(clock=clock, wake_debounce_s=60.0)
    sids = [f"bw{i}" for i in range(70)]  # more than one chunk
    idle_with_blockers(b, sids)
    clock.set(int(time.time() * 1000))  # the arrivals' Redis time is the debounce's start
    # The arrivals, as one batch: each planned (a due entry), none woken yet.
    reports = deliver_many(b.delivery, sids)
    assert [r.session for r in reports] == sids
    assert sum(r.inbox for r in reports) == len(sids)
    assert all(not events(b, sid, "wake") for sid in sids)
    due = set(b.store.r.zrange(b.store.k.due, 0, -1))
    assert {f"due|{sid}" for sid in sids} <= due
    held = b.store.delivery.lock(sids[0])  # another delivery holds the first one
    assert held is not None
    clock.advance(61_000)  # past the due times
    ticks: list[int] = []
    # A session twice: delivered once. The progress callback (a worker's heartbeat)
    # hears of each chunk and of each session delivered on its own (the held one).
    reports = deliver_many(b.delivery, sids + sids[1:3], progress=lambda: ticks.append(1))
    assert len(ticks) >= 3  # 2 chunks + the held one's hand-off
    assert len(reports) == len(sids)
    assert reports[0].busy and not reports[0].notices
    for sid, report in zip(sids[1:], reports[1:], strict=True):
        assert [n["wake"] for n in report.notices] == [True]
        assert len(events(b, sid, "wake")) == 1
        assert len(b.floor.peek(sid)) == 1
        assert b.session(sid).state == "running"
    # The held one is not lost: the hand-off flag and a lease kick are there for it.
    assert b.store.r.exists(b.store.k.s(sids[0], "again"))
    assert f"lease|{sids[0]}" in b.store.r.zrange(b.store.k.due, 0, -1)
    b.store.delivery.unlock(sids[0], held)
    assert [n["wake"] for n in deliver_many(b.delivery, [sids[0]])[0].notices] == [True]
    # Run again: nothing more to do, no second wake, every lock free.
    assert all(not r.notices for r in deliver_many(b.delivery, sids))
    for sid in sids:
        assert len(events(b, sid, "wake")) == 1
        assert not b.store.r.exists(b.store.k.s(sid, "lock"))


def test_a_running_session_gets_a_steer_notice_and_no_wake(make_bus: Callable[..., Bus]) -> None:
    b = make_bus()
    sids = [f"run{i}" for i in range(5)]
    for sid in sids:
        b.open_session(sid)
        b.turn(sid, "start")
    b.send_many(
        [{"from": "hx:peer", "to_id": sid, "text": f"m{n}"} for n in range(3) for sid in sids]
    )
    reports = deliver_many(b.delivery, sids)
    for sid, report in zip(sids, reports, strict=True):
        assert [(n["wake"], n["messages"]) for n in report.notices] == [(False, 3)]
        assert not events(b, sid, "wake")
        assert len(b.floor.peek(sid)) == 1


def test_a_queue_longer_than_one_read_is_taken_whole_in_one_run(
    make_bus: Callable[..., Bus],
) -> None:
    # Two running sessions in one batch, one with its inbox off: each read goes round
    # take and snapshot again until the queue is empty; the inbox's session hears ONE
    # notice carrying every message, the other each message as its own line, once.
    b = make_bus()
    for sid in ("long", "plain"):
        b.open_session(sid)
        b.turn(sid, "start")
    b.store.sessions.update_session("plain", agent_inbox=False)
    n = 2 * BATCH + 7
    sent = {
        sid: [
            a["id"]
            for a in b.send_many(
                [{"from": f"hx:to-{sid}", "to_id": sid, "text": f"m{i}"} for i in range(n)]
            )
        ]
        for sid in ("long", "plain")
    }
    reports = deliver_many(b.delivery, ["long", "plain"])
    long, plain = reports
    assert (long.inbox, long.raw) == (n, 0)
    assert [x["messages"] for x in long.notices] == [n]
    [line] = b.floor.peek("long")
    assert sorted(line["notice"]["messages"]) == sorted(sent["long"])
    assert (plain.inbox, plain.raw) == (0, n)
    assert [x["id"] for x in b.floor.peek("plain")] == sent["plain"]
    for sid in ("long", "plain"):
        assert b.store.queue.read_after(sid, b.store.queue.cursor(sid), BATCH) == []
        assert not b.store.r.exists(b.store.k.s(sid, "lock"))


def taken_lists(b: Bus) -> dict[str, int]:
    pattern = b.store.k.kick_taken(b.settings.host, "x")[:-1] + "*"
    return {str(key): int(b.store.r.llen(key)) for key in b.store.r.scan_iter(match=pattern)}


@pytest.mark.slow
def test_a_loop_killed_holding_a_batch_of_kicks_loses_none_of_them(
    settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    s = replace(settings, kick="list")
    b = Bus(s, dispatcher=RecordingDispatcher())
    b.store.delivery.kick_alive(s.host, 60_000)  # the pushes go to the list before any loop runs
    sids = [f"kw{i}" for i in range(80)]
    idle_with_blockers(b, sids)
    kicks = b.store.k.kick_list(s.host)
    pushed = b.store.r.llen(kicks)  # a kick each at least (the turns' ends kick too)
    assert pushed >= len(sids)
    doomed = start_worker(s, INBOX_FAULT="kick:after_pop")
    wait_for(lambda: any("SIGKILL" in line for line in list(doomed.log)), what="the kill")
    doomed.kill()
    # The killed loop took many kicks at once (BLMOVE, then kick_take.lua): in its taken
    # list, with the rest still on the list, none lost.
    taken = taken_lists(b)
    assert max(taken.values()) > 1
    assert sum(taken.values()) + b.store.r.llen(kicks) == pushed
    start_worker(s, concurrency=2)  # the host's worker again: it puts them back
    sch = Scheduler(s)
    try:
        wait_for(lambda: all(events(b, sid, "wake") for sid in sids), what="every wake", timeout=30)
    finally:
        sch.stop()
    for sid in sids:
        assert len(events(b, sid, "wake")) == 1
        assert len(b.floor.peek(sid)) == 1
    wait_for(lambda: not any(taken_lists(b).values()), what="the taken lists emptied")


def test_a_dead_loops_taken_kicks_go_back_to_the_head_of_the_list(
    make_bus: Callable[..., Bus],
) -> None:
    b = make_bus()
    store, host = b.store, b.settings.host
    kicks = store.k.kick_list(host)
    store.r.rpush(kicks, "a", "b", "c", "d")
    store.delivery.kick_beat(host, "l1", 3000)
    client, pool = store.delivery.kick_client(0.1, "test-kick")
    try:
        assert pop_kicks(store, client, host, "l1", 0.1, 3) == ["a", "b", "c"]
    finally:
        if pool is not None:
            pool.disconnect()
    taken = store.k.kick_taken(host, "l1")
    assert store.r.lrange(taken, 0, -1) == ["a", "b", "c"]
    assert store.r.lrange(kicks, 0, -1) == ["d"]
    assert store.delivery.reclaim_kicks(host, 60_000) == 0  # alive: left alone
    assert store.r.lrange(taken, 0, -1) == ["a", "b", "c"]
    store.r.hset(store.k.kick_loops(host), "l1", 0)  # its beat long gone: dead
    assert store.delivery.reclaim_kicks(host, 60_000) == 3
    assert store.r.lrange(kicks, 0, -1) == ["a", "b", "c", "d"]
    assert not store.r.exists(taken)
    assert not store.r.hexists(store.k.kick_loops(host), "l1")
    store.delivery.kick_beat(host, "l2", 3000)
    client, pool = store.delivery.kick_client(0.1, "test-kick")
    try:
        assert pop_kicks(store, client, host, "l2", 0.1, 64) == ["a", "b", "c", "d"]
        assert pop_kicks(store, client, host, "l2", 0.1, 64) == []  # none came
    finally:
        if pool is not None:
            pool.disconnect()
    store.delivery.done_kicks(host, "l2")
    assert not store.r.exists(store.k.kick_taken(host, "l2"))
