"""The scheduler's backlog sweep in chunks (bus.delivery.scheduler): what it reads of a session in
one round trip matches the one-session reads, its rule is a pure table, and due entries
are taken between its chunks (a wake due while a long sweep runs is not held to its end)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from bus.api import Bus
from bus.core.clock import ManualClock
from bus.core.models import SessionInfo
from bus.delivery import scheduler
from bus.delivery.scheduler import needs_delivery, sweep_backlogs, tick
from bus.store.many import SweepView, stream_id_after


@pytest.mark.parametrize(
    ("last", "cursor", "after"),
    [
        ("5-0", None, True),  # nothing taken yet
        ("5-0", "", True),
        ("5-0", "5-0", False),
        ("5-1", "5-0", True),
        ("5-0", "5-1", False),
        ("10-0", "9-7", True),  # numbers, not text: "10" < "9" as text
        ("9-7", "10-0", False),
    ],
)
def test_stream_ids_compare_as_redis_orders_them(
    last: str, cursor: str | None, after: bool
) -> None:
    assert stream_id_after(last, cursor) is after


def info(**fields: Any) -> SessionInfo:
    return SessionInfo(session="s", handle="h:s", host="h", state="idle", **fields)


def view(**fields: Any) -> SweepView:
    base: dict[str, Any] = {
        "backlog": False,
        "flight_at": None,
        "has_new": False,
        "due_at": None,
        "retry_at": None,
        "floor_records": [],
    }
    return SweepView(**{**base, **fields})


NOW, STALE_BEFORE = 10_000, 7_000


@pytest.mark.parametrize(
    ("inf", "v", "kick"),
    [
        (info(), view(), False),  # nothing to do
        (info(), view(backlog=True), True),  # queue entries no delivery took
        (info(), view(flight_at=6_000), True),  # a notice in flight past the lock's TTL
        (info(), view(flight_at=8_000, has_new=True), False),  # in flight, not stale yet
        (info(wake_pending="ntc-1"), view(), True),  # a wake whose command never ran
        (info(), view(has_new=True), True),  # new, nothing scheduled: a lost dispatch
        (info(), view(has_new=True, due_at=NOW + 500), False),  # its wake is scheduled
        (info(), view(has_new=True, retry_at=NOW + 500), False),  # its retry is scheduled
        (info(prompt_waiting=True), view(has_new=True), False),  # waits for its prompt
    ],
)
def test_which_sessions_the_sweep_delivers(inf: SessionInfo, v: SweepView, kick: bool) -> None:
    assert needs_delivery(inf, v, STALE_BEFORE, NOW) is kick


def test_the_chunked_reads_match_the_one_session_reads(make_bus: Callable[..., Bus]) -> None:
    b = make_bus(agent_inbox=True)
    store = b.store
    for sid in ("fresh", "queued", "taken", "due"):
        b.open_session(sid)
    b.send({"from": "hosta:me", "to_id": "queued", "text": "not taken yet"})
    b.send({"from": "hosta:me", "to_id": "taken", "text": "taken"})
    b.deliver_session("taken")
    store.schedule.schedule("due", "due", 12345)
    sids = ["fresh", "queued", "taken", "due", "nobody"]
    got = store.schedule.sweep_views(sids)
    assert [i.session for i, _v in got] == ["fresh", "queued", "taken", "due"]  # nobody: gone
    for inf, v in got:
        sid = inf.session
        assert inf == store.sessions.get_session(sid)
        assert v.backlog is bool(store.queue.read_after(sid, store.queue.cursor(sid), 1))
        r, k = store.r, store.k
        at = r.hget(k.s(sid, "notice"), "at")
        assert v.flight_at == (None if at is None else int(at))
        assert v.has_new is bool(r.exists(k.s(sid, "new")))
        due, retry = (r.zscore(k.due, f"{what}|{sid}") for what in ("due", "retry"))
        assert (v.due_at, v.retry_at) == (
            None if due is None else int(due),
            None if retry is None else int(retry),
        )
        assert v.floor_records == list(r.hvals(k.s(sid, "floor")))
    backlog = {i.session: v.backlog for i, v in got}
    assert backlog == {"fresh": False, "queued": True, "taken": False, "due": False}


def test_the_sweep_reads_only_the_sessions_its_server_side_test_keeps(
    make_bus: Callable[..., Bus], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Eight reads a session every 5 s were most of an idle 1,010-session swarm's scheduler
    # calls: sweep_quiet.lua leaves the quiet ones out, and none it leaves out is one the
    # sweep would deliver.
    b = make_bus(agent_inbox=True)
    store, r, k = b.store, b.store.r, b.store.k
    for sid in ("fresh", "queued", "taken", "flight", "new", "floor", "waking", "nocursor"):
        b.open_session(sid)
    b.send({"from": "hosta:me", "to_id": "queued", "text": "not taken yet"})
    b.send({"from": "hosta:me", "to_id": "taken", "text": "taken"})
    b.deliver_session("taken")
    r.hset(k.s("flight", "notice"), "at", 1)
    r.set(k.s("new", "new"), "1")
    r.hset(k.s("floor", "floor"), "n1", "record")
    r.hset(k.s("waking", "session"), "wake_pending", "n1")
    r.xadd(k.s("nocursor", "stream"), {"m": "{}"})
    sids = ["fresh", "queued", "taken", "flight", "new", "floor", "waking", "nocursor", "nobody"]
    kept = store.schedule.sweep_candidates(sids)
    assert {"queued", "flight", "new", "floor", "waking", "nocursor"} <= set(kept)
    assert "fresh" not in kept and "nobody" not in kept
    now = store.server_time_ms()
    for inf, view in store.schedule.sweep_views(sids):
        if needs_delivery(inf, view, now - 3000, now):
            assert inf.session in kept, inf.session
    read: list[list[str]] = []
    real = store.schedule.sweep_views

    def views(ids: list[str]) -> Any:
        read.append(ids)
        return real(ids)

    monkeypatch.setattr(store.schedule, "sweep_views", views)
    sweep_backlogs(b)
    # The sweep takes the sessions oldest first: those opened in one millisecond by name.
    assert [sorted(ids) for ids in read] == [sorted(kept)]


def test_the_sweep_dispatches_each_lost_dispatch_once(make_bus: Callable[..., Bus]) -> None:
    b = make_bus(agent_inbox=True)
    for sid in ("q1", "q2", "q3"):
        b.open_session(sid)
        b.send({"from": "hosta:me", "to_id": sid, "text": "lost dispatch"})
        b.store.queue.clear_pending(sid)
    calls = b.dispatcher.calls  # type: ignore[attr-defined]
    calls.clear()
    assert sweep_backlogs(b.delivery) == 3
    assert sorted(calls) == [("hosta", "q1"), ("hosta", "q2"), ("hosta", "q3")]
    calls.clear()
    assert sweep_backlogs(b.delivery) == 0 and calls == []  # their flags are set: not twice


def test_a_wake_due_during_a_long_sweep_is_taken_between_its_chunks(
    make_bus: Callable[..., Bus], monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock(1_000_000)
    b = make_bus(agent_inbox=True, clock=clock)
    for n in range(6):
        b.open_session(f"idle{n}")
    b.open_session("waker")
    b.store.schedule.schedule("due", "waker", clock.now_ms() + 1000)
    monkeypatch.setattr(scheduler, "SWEEP_CHUNK", 2)
    real = b.store.schedule.sweep_views
    chunks: list[int] = []

    def slow_chunk(sids: list[str]) -> Any:
        chunks.append(len(sids))
        if len(chunks) == 1:
            clock.advance(2000)  # the wake falls due while the sweep reads its first chunk
        return real(sids)

    monkeypatch.setattr(b.store.schedule, "sweep_views", slow_chunk)
    calls = b.dispatcher.calls  # type: ignore[attr-defined]
    calls.clear()
    order: list[int] = []

    def seen_at_chunk(host: str, sids: list[str]) -> None:
        order.append(len(chunks))
        calls.extend((host, sid) for sid in sids)

    monkeypatch.setattr(b.dispatcher, "request_many", seen_at_chunk)
    got = tick(b.delivery, sweep=True, clock=clock)
    assert len(chunks) == 4  # 7 sessions, 2 a chunk
    assert got["taken"] == 1 and ("hosta", "waker") in calls
    assert order == [1]  # dispatched right after the first chunk, not after the sweep
