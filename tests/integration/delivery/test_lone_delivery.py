"""What spares a lone delivery its round trips, and holds it to the same rules.

A running session's notice is taken in its delivery's snapshot call (parts/snapshot.lua's
steer_ready) only where the plan (bus.core.policy.decide, with
nothing left to settle first, bus.delivery.engine.left_over) sends a steer, and a take the plan does not
send is given back, its messages new again. A send from a session keeps the receiver's
wake fact about it in the queue's entry (bus.services.routing), which the delivery reads
instead of looking it up; an entry without one is looked up as before.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bus.api import Bus
from bus.core import policy
from bus.delivery import engine, kick_list
from bus.delivery.engine import left_over
from bus.delivery.kick_list import KickLoop
from bus.delivery.report import DeliveryReport
from bus.delivery.take import inbox_entries
from bus.ops.embedded import EmbeddedRedis
from bus.store.delivery import DeliverySnapshot, taken_records
from bus.surfaces.harness.listener import Listener
from tests.support.listeners import collect
from tests.support.trips import Trips, script_names
from tests.support.waiting import wait_for


def _snapshot_with_take(
    bus: Bus, sid: str, *, inbox_default: bool = True
) -> tuple[DeliverySnapshot, str]:
    """The engine's batched steps up to the snapshot, asking for the take: the start,
    the messages into the inbox and the snapshot in one pipeline; the lock freed after."""
    store = bus.store
    [start] = store.delivery.begin_many([sid], 200)
    assert start is not None and start.rows
    pipe = store.pipeline()
    report = DeliveryReport(session=sid)
    batch, raws = inbox_entries(start.rows, start.answers, report)
    bus.inbox.ingest(sid, batch, start.info, report, pipe=pipe, raws=raws)
    nid = "ntc-test"
    [snap] = store.delivery.snapshot_many_after(
        pipe,
        [(sid, start.token, start.rows[-1][0])],
        200,
        takes=[nid],
        now=1,
        inbox_default=inbox_default,
    )
    store.delivery.unlock_many([(sid, start.token)])
    return snap, nid


def _running(bus: Bus, sid: str) -> None:
    bus.open_session(sid)
    bus.turn(sid, "start")


def _set(bus: Bus, sid: str, **fields: str) -> None:
    bus.store.r.hset(bus.store.k.s(sid, "session"), mapping=fields)


# (name, how the session is set up before a message arrives, taken)
CASES: list[tuple[str, Callable[[Bus, str], Any], bool]] = [
    ("running", _running, True),
    ("running, inbox off", lambda b, s: (_running(b, s), _set(b, s, agent_inbox="0")), False),
    ("running, inbox on", lambda b, s: (_running(b, s), _set(b, s, agent_inbox="1")), True),
    ("running, a prompt waiting", lambda b, s: (_running(b, s), _set(b, s, prompt_waiting="1")), False),
    ("running, a wake pending", lambda b, s: (_running(b, s), _set(b, s, wake_pending="ntc-w")), False),
    ("running, a retry set", lambda b, s: (_running(b, s), _set(b, s, retry_at="99999999999999")), False),
    ("idle", lambda b, s: b.open_session(s), False),
    ("closing", lambda b, s: (_running(b, s), _set(b, s, state="closing")), False),
    (
        "running, a notice in flight",
        lambda b, s: (_running(b, s), b.store.r.hset(b.store.k.s(s, "notice"), "id", "ntc-old")),
        False,
    ),
    (
        "running, a notice unconfirmed on the floor",
        lambda b, s: (
            _running(b, s),
            b.store.r.hset(b.store.k.s(s, "floor"), "ntc-f", json.dumps({"at": 1})),
        ),
        False,
    ),
]  # fmt: skip


@pytest.mark.parametrize(("name", "setup", "taken"), CASES, ids=[c[0] for c in CASES])
def test_the_snapshot_takes_a_notice_only_where_the_plan_sends_a_steer(
    bus: Bus, name: str, setup: Callable[[Bus, str], Any], taken: bool
) -> None:
    setup(bus, "s")
    sent = bus.send({"id": "m1", "from": "hosta:me", "to_id": "s", "text": "hi"})
    snap, nid = _snapshot_with_take(bus, "s")
    assert (snap.taken is not None) is taken, name
    info = snap.info
    assert info is not None
    plan = bus.inbox.decide(bus.inbox.view_of(info, snap.view))
    left = left_over(info, snap.notice_id, snap.floor_ids, False)
    if snap.taken is not None:
        # Taken: the plan read from the same snapshot sends a steer, nothing to settle first.
        assert (left, plan.action) == (False, "notice"), name
        assert json.loads(snap.taken)[0] == [sent["id"]]
        assert bus.store.r.hget(bus.store.k.s("s", "notice"), "id") == nid
        assert taken_records(snap.taken)
    else:
        assert bus.store.r.hget(bus.store.k.s("s", "notice"), "id") != nid


def test_no_take_when_the_inbox_is_off_by_default(bus: Bus) -> None:
    _running(bus, "s")
    bus.send({"id": "m1", "from": "hosta:me", "to_id": "s", "text": "hi"})
    snap, _nid = _snapshot_with_take(bus, "s", inbox_default=False)
    assert snap.taken is None


def test_a_running_session_s_lone_delivery_takes_no_separate_notice_call(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    _running(bus, "s")
    got: list[dict[str, Any]] = []
    listener = Listener.for_session(bus.floor, "s", collect(got)).start()
    takes: list[Any] = []
    real = bus.store.delivery.take_notices
    monkeypatch.setattr(
        bus.store.delivery,
        "take_notices",
        lambda items, now: (takes.append(items), real(items, now))[1],
    )
    try:
        sent = bus.send({"id": "m1", "from": "hosta:me", "to_id": "s", "text": "hi"})
        report = bus.deliver_session("s")
        wait_for(lambda: got, 10, "the notice heard")
    finally:
        listener.stop()
    assert [n["messages"] for n in report.notices] == [1]
    assert got[-1]["notice"]["messages"] == [sent["id"]]
    assert takes == []
    assert not bus.store.r.exists(bus.store.k.s("s", "notice"))  # confirmed
    assert not bus.store.r.zcard(bus.store.k.s("s", "new"))


def test_a_notice_taken_for_a_steer_the_plan_does_not_send_is_given_back(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    _running(bus, "s")
    sent = bus.send({"id": "m1", "from": "hosta:me", "to_id": "s", "text": "hi"})
    monkeypatch.setattr(bus.inbox, "decide", lambda _view: policy.Plan("wait", None, "test"))
    gave_back: list[str] = []
    real_give_back = engine.give_back

    def give_back(store: Any, clock: Any, run: Any) -> None:
        if run.snap is not None and run.snap.taken:
            gave_back.append(run.sid)
        real_give_back(store, clock, run)

    monkeypatch.setattr(engine, "give_back", give_back)
    report = bus.deliver_session("s")
    assert gave_back == ["s"]  # the snapshot took it, the plan said wait
    assert report.notices == []
    k = bus.store.k
    assert not bus.store.r.exists(k.s("s", "notice"))
    assert bus.store.r.zrange(k.s("s", "new"), 0, -1) == [sent["id"]]
    kinds = [f["kind"] for _id, f in bus.store.r.xrange(k.s("s", "events"))]
    assert kinds[-2:] == ["notice_built", "notice_reverted"]
    # The next delivery, planned as usual, sends it.
    monkeypatch.undo()
    again = bus.deliver_session("s")
    assert [n["messages"] for n in again.notices] == [1]


# -- the receiver's wake fact about a sending session, kept by the send -----------------


def _entry_facts(bus: Bus, sid: str) -> list[str | None]:
    return [f.get("w") for _eid, f in bus.store.r.xrange(bus.store.k.s(sid, "stream"))]


def test_a_send_from_a_session_keeps_the_receiver_s_wake_fact_about_it(bus: Bus) -> None:
    bus.open_session("boss")
    bus.open_session("child", parent="boss")
    bus.open_session("stranger")
    bus.open_session("helper")
    bus.store.sessions.add_gave("boss", "helper")  # boss gave helper its first work
    for sender in ("child", "stranger", "helper"):
        bus.send({"from": f"hosta:{sender}", "from_session": sender, "to_id": "boss", "text": "r"})
    bus.send({"from": "hosta:person", "to_id": "boss", "text": "no session"})
    assert _entry_facts(bus, "boss") == ["g", "-", "g", None]


def test_a_delivery_reads_the_kept_fact_and_looks_nothing_up(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    bus.open_session("boss")
    bus.turn("boss", "start")
    bus.turn("boss", "end")  # it has had a turn: a report wakes it only from those it gave work
    bus.open_session("child", parent="boss")
    bus.open_session("stranger")
    sent = {
        who: bus.send(
            {"from": f"hosta:{who}", "from_session": who, "to_id": "boss", "text": "done",
             "class": "report"}
        )["id"]
        for who in ("child", "stranger")
    }  # fmt: skip

    def no_lookup(*_a: object) -> None:
        pytest.fail("the delivery looked the sender's facts up")

    monkeypatch.setattr(bus.store.sessions, "gave_and_session", no_lookup)
    bus.deliver_session("boss")
    wakeq = bus.store.r.zrange(bus.store.k.s("boss", "wakeq"), 0, -1)
    new = bus.store.r.zrange(bus.store.k.s("boss", "new"), 0, -1)
    assert sorted(new) == sorted(sent.values())
    assert wakeq == [sent["child"]]  # a report from its child wakes it; a stranger's waits


def test_an_entry_without_a_kept_fact_is_looked_up_as_before(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    bus.open_session("boss")
    bus.turn("boss", "start")
    bus.turn("boss", "end")
    bus.open_session("child", parent="boss")
    # As an entry stored before sends kept the fact: none on it.
    real_append = bus.store.queue.append
    monkeypatch.setattr(
        bus.store.queue, "append", lambda *a, **kw: real_append(*a, **{**kw, "facts": ""})
    )
    sent = bus.send(
        {"from": "hosta:child", "from_session": "child", "to_id": "boss", "text": "done",
         "class": "report"}
    )  # fmt: skip
    assert _entry_facts(bus, "boss") == [None]
    looked: list[str] = []
    real = bus.store.sessions.gave_and_session
    monkeypatch.setattr(
        bus.store.sessions, "gave_and_session", lambda g, t: (looked.append(t), real(g, t))[1]
    )
    bus.deliver_session("boss")
    assert looked == ["child"]
    assert bus.store.r.zrange(bus.store.k.s("boss", "wakeq"), 0, -1) == [sent["id"]]


# -- a lone delivery's notice records, written with the kick loop's next wait ------------


def _kick_trips(trips: Trips, bus: Bus) -> list[list[str]]:
    """The round trips the worker's delivery loops (``kick-N`` threads) sent, each its
    commands' names, a script by its name."""
    with trips.lock:
        sent = list(trips.sent)
    return [
        [name.partition(":")[2] or name for name in script_names(names, bus)]
        for _at, thread, names in sent
        if thread.startswith("kick-")
    ]


# A loop's beat (every BEAT_S) and a new connection's greeting: not the message's.
BEATS = {"kick_beat", "kick_reclaim", "HGETALL", "TIME", "HELLO", "PING", "CLIENT", "AUTH"}


def _lone_setup(
    make_bus: Callable[..., Bus],
    threads: int = 1,
    on_line: Callable[[dict[str, Any]], None] | None = None,
) -> tuple[Bus, list[dict[str, Any]], Listener, KickLoop]:
    """A worker's delivery loop running (as under ``inbox up``), then a running session
    with its listener (``on_line`` told of each notice before its ack), and a sender's
    session."""
    b = make_bus(metrics_flush_s=1.0)  # as a worker runs: counters off the path
    if b.store.cluster:
        pytest.skip("a cluster's pipelines split by node: its records go on their own")
    loop = KickLoop(b.delivery, threads=threads).start()
    wait_for(lambda: b.store.r.exists(b.store.k.kick_alive(b.settings.host)), 10, "alive")
    _running(b, "s")
    b.open_session("snd")
    got: list[dict[str, Any]] = []
    keep = collect(got)

    def heard(line: dict[str, Any]) -> bool:
        if on_line is not None:
            on_line(line)
        return keep(line)

    listener = Listener.for_session(b.floor, "s", heard).start()
    return b, got, listener, loop


def _lone_send(b: Bus, got: list[dict[str, Any]], mid: str) -> None:
    """Send as an agent does (its send pushes the kick onto the list) and wait until the
    notice is heard and confirmed."""
    n = len(got)
    b.send({"id": mid, "from": "hosta:snd", "from_session": "snd", "to_id": "s", "text": "hi"})
    wait_for(lambda: len(got) > n, 10, "the notice heard")
    wait_for(lambda: not b.store.r.exists(b.store.k.s("s", "notice")), 10, "the notice confirmed")


def test_a_lone_kick_costs_its_loop_three_round_trips_the_records_written_with_the_next_wait(
    make_bus: Callable[..., Bus],
) -> None:
    b, got, listener, loop = _lone_setup(make_bus)
    try:
        _lone_send(b, got, "warm")  # connections open, scripts loaded
        recorder = Trips()
        recorder.install()
        try:
            _lone_send(b, got, "one")
        finally:
            recorder.uninstall()
        trips = [names for names in _kick_trips(recorder, b) if not BEATS & set(names)]
    finally:
        loop.stop()
        listener.stop()
    assert [n for n in trips[0] if n != "SCRIPT"] == ["delivery_begin"], trips
    assert trips[1] == ["thread_append", "ingest", "delivery_snapshot"], trips
    # The heard notice's records (with the unlock), written straight after the ack with
    # the loop's next wait behind them: Redis runs them before it waits. (The loop's
    # connection ran notice_finish for the warm send: no source sent along.)
    assert trips[2] == ["notice_finish", "DEL", "BLMOVE", "LLEN"], trips
    assert len(trips) == 3, trips
    marks = [json.loads(v)["mark"] for v in b.store.r.hvals(b.store.k.s("s", "msgs"))]
    assert marks == ["noticed", "noticed"]
    assert not b.store.r.exists(b.store.k.s("s", "lock"))


def test_a_session_handed_work_before_its_records_went_runs_again_at_once(
    make_bus: Callable[..., Bus], monkeypatch: pytest.MonkeyPatch
) -> None:
    runs: list[list[str]] = []
    real = kick_list.deliver_many
    handed: list[int] = []  # the runs when the flag was set

    def deliver_many(host: Any, sids: list[str], **kw: Any) -> Any:
        runs.append(list(sids))
        return real(host, sids, **kw)

    def on_line(line: dict[str, Any]) -> None:
        if "one" in line["notice"]["messages"]:
            # A delivery found the lock held while the listener had the notice: the
            # hand-off flag, which the records' unlock takes (their reply read only
            # after the loop's next wait, which the records' kick ends at once).
            handed.append(len(runs))
            b.store.r.set(b.store.k.s("s", "again"), "1")

    monkeypatch.setattr(kick_list, "deliver_many", deliver_many)
    monkeypatch.setattr(kick_list, "BLOCK_S", 30.0)  # a wait no kick ends would outlast the test
    b, got, listener, loop = _lone_setup(make_bus, on_line=on_line)
    try:
        _lone_send(b, got, "warm")
        _lone_send(b, got, "one")
        wait_for(lambda: len(runs) > handed[0], 10, "the session run again")
        assert not b.store.r.exists(b.store.k.s("s", "again"))
    finally:
        b.store.r.rpush(b.store.k.kick_list(b.settings.host), "s")  # ends the last wait
        loop.stop()
        listener.stop()
    assert runs[handed[0]] == ["s"]


def test_a_loop_stopped_with_its_wait_out_delivers_the_kick_that_wait_brought(
    make_bus: Callable[..., Bus],
) -> None:
    def on_line(line: dict[str, Any]) -> None:
        if "one" in line["notice"]["messages"]:
            # Stopped while it delivers: the wait written with the records is out when
            # the loop stops, and a kick for another session comes for it.
            loop.stop_event.set()
            b.send({"id": "other", "from": "hosta:snd", "to_id": "s2", "text": "hi"})

    b, got, listener, loop = _lone_setup(make_bus, on_line=on_line)
    _running(b, "s2")
    try:
        _lone_send(b, got, "warm")
        _lone_send(b, got, "one")
    finally:
        loop.stop()
        listener.stop()
    assert not any(t.is_alive() for t in loop._running)
    k, host = b.store.k, b.settings.host
    assert b.store.r.hexists(k.s("s2", "msgs"), "other")  # delivered, not left taken
    assert not b.store.r.keys(k.kick_taken(host, "x").replace(":x", ":*"))
    assert b.store.r.llen(k.kick_list(host)) == 0
    assert loop._listen.acquire(blocking=False)  # the listening lock let go


def test_a_loop_whose_connection_dies_with_its_wait_out_listens_again(
    make_bus: Callable[..., Bus],
) -> None:
    b, got, listener, loop = _lone_setup(make_bus)
    try:
        _lone_send(b, got, "warm")  # its records and the loop's next wait written
        name = f"inbox-kick:{b.settings.host}:"
        waiting = [c for c in b.store.r.client_list() if c["name"].startswith(name)]
        assert waiting and waiting[0]["cmd"] == "blmove"
        b.store.r.client_kill_filter(_id=waiting[0]["id"])
        _lone_send(b, got, "one")
        _lone_send(b, got, "two")
    finally:
        loop.stop()
        listener.stop()
    heard = [m for line in got for m in line["notice"]["messages"]]
    assert heard == ["warm", "one", "two"]


def test_records_a_server_lost_the_script_of_are_run_again_and_heard_once(
    make_bus: Callable[..., Bus], tmp_path: Path
) -> None:
    # A server of the test's own: its scripts are flushed between two lone sends, as a
    # restart without a dropped connection would leave them.
    with EmbeddedRedis(tmp_path / "r.sock", tmp_path / "data", persist=False) as server:
        b, got, listener, loop = _lone_setup(lambda **kw: make_bus(redis_url=server.url, **kw))
        try:
            _lone_send(b, got, "warm")
            b.store.r.script_flush()
            _lone_send(b, got, "one")  # waits for the notice confirmed
            _lone_send(b, got, "two")
        finally:
            loop.stop()
            listener.stop()
        heard = [m for line in got for m in line["notice"]["messages"]]
        marks = [json.loads(v)["mark"] for v in b.store.r.hvals(b.store.k.s("s", "msgs"))]
    assert sorted(heard) == ["one", "two", "warm"]
    assert marks == ["noticed"] * 3
