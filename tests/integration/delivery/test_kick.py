"""The kick list (INBOX_KICK=list, bus/delivery/kick_list.py): a worker's delivery loop runs the delivery
without a Celery task; a kick lost with a killed worker is recovered; Redis restarts."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import redis

from bus.api import Bus
from bus.core.settings import Settings
from bus.delivery.dispatch import RecordingDispatcher
from bus.delivery.host import DeliveryParts
from bus.delivery.kick_list import ListDispatcher
from bus.ops.embedded import EmbeddedRedis
from bus.surfaces.harness.listener import Listener
from tests.support.listeners import collect
from tests.support.local_servers import free_port
from tests.support.waiting import wait_for
from tests.support.worker_proc import WorkerProcess


def kick_bus(s: Settings) -> tuple[Bus, RecordingDispatcher]:
    """A bus kicking through the list; its fallback (Celery's place) only records."""
    fallback = RecordingDispatcher()
    return Bus(s, dispatcher=fallback), fallback


def loop_alive(bus: Bus) -> bool:
    return bool(bus.store.r.exists(bus.store.k.kick_alive(bus.settings.host)))


def heard_ids(lines: list[dict[str, object]]) -> set[str]:
    out: set[str] = set()
    for obj in lines:
        notice = obj.get("notice") or {}
        out.update(str(i) for i in (notice.get("messages") or [obj.get("id")]))  # type: ignore[union-attr]
    return out


def test_with_no_loop_alive_the_kick_goes_to_the_fallback(settings: Settings) -> None:
    bus, fallback = kick_bus(replace(settings, kick="list"))
    assert isinstance(bus.dispatcher, ListDispatcher)
    bus.dispatcher.request(settings.host, "nobody")
    assert fallback.calls == [(settings.host, "nobody")]
    assert bus.store.r.llen(bus.store.k.kick_list(settings.host)) == 0
    bus.store.delivery.kick_alive(settings.host, 10_000)  # a loop says it is alive
    bus.dispatcher.request(settings.host, "somebody")
    assert fallback.calls == [(settings.host, "nobody")]
    assert bus.store.r.lrange(bus.store.k.kick_list(settings.host), 0, -1) == ["somebody"]


def test_a_send_pushes_its_kick_in_the_append_s_own_call_when_a_loop_is_alive(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    bus, fallback = kick_bus(replace(settings, kick="list"))
    if bus.store.cluster:
        pytest.skip("the kick list is in another slot than the session on a cluster")
    host = settings.host
    bus.open_session("alive", host=host)
    bus.open_session("dead", host=host)
    kicks = bus.store.k.kick_list(host)
    pushes: list[list[str]] = []
    real_push = bus.store.delivery.push_kicks
    monkeypatch.setattr(
        bus.store.delivery, "push_kicks", lambda h, s: pushes.append(s) or real_push(h, s)
    )

    # No loop alive: the append pushes nothing; the dispatcher tries the list, then its
    # fallback.
    bus.send({"from": "a:b", "to_id": "dead", "text": "one"})
    assert (pushes, fallback.calls, bus.store.r.llen(kicks)) == ([["dead"]], [(host, "dead")], 0)

    # A loop alive: the append's own call pushes the kick; the dispatcher is not asked.
    bus.store.delivery.kick_alive(host, 10_000)
    sent = bus.send({"from": "a:b", "to_id": "alive", "text": "two"})
    assert sent["state"] == "stored"
    assert bus.store.r.lrange(kicks, 0, -1) == ["alive"]
    assert pushes == [["dead"]] and fallback.calls == [(host, "dead")]
    # A second message while that delivery is pending kicks nothing more.
    bus.send({"from": "a:b", "to_id": "alive", "text": "three"})
    assert bus.store.r.lrange(kicks, 0, -1) == ["alive"]
    # A resend of a stored id neither.
    bus.send({"id": sent["id"], "from": "a:b", "to_id": "alive", "text": "two"})
    assert bus.store.r.lrange(kicks, 0, -1) == ["alive"]


def test_a_kick_on_the_list_is_delivered_by_a_worker_loop_without_a_celery_task(
    settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    s = replace(settings, kick="list")
    start_worker(s)
    bus, fallback = kick_bus(s)
    wait_for(lambda: loop_alive(bus), what="the worker's kick loop")
    bus.open_session("kicked")
    bus.turn("kicked", "start")
    lines: list[dict[str, object]] = []
    with Listener.for_session(bus.floor, "kicked", collect(lines)):
        sent = [
            bus.send({"from": "hosta:me", "to_id": "kicked", "text": f"m{i}"}) for i in range(3)
        ]
        wait_for(lambda: {m["id"] for m in sent} <= heard_ids(lines), what="the messages")
    assert fallback.calls == []  # no Celery task was asked for


def doomed_worker(
    settings: Settings, start_worker: Callable[..., WorkerProcess], fault: str, sid: str
) -> tuple[Settings, WorkerProcess, Bus, RecordingDispatcher]:
    """A worker that SIGKILLs itself at ``fault`` (its kick loop alive), and a running
    session ``sid``: the kick-list settings, the worker, a sender's bus and its fallback."""
    s = replace(settings, kick="list")
    doomed = start_worker(s, INBOX_FAULT=fault)
    bus, fallback = kick_bus(s)
    wait_for(lambda: loop_alive(bus), what="the doomed worker's kick loop")
    bus.open_session(sid)
    bus.turn(sid, "start")
    return s, doomed, bus, fallback


def start_kick_delivered(bus: Bus, sid: str) -> None:
    """Until the kick of ``sid``'s turn start is delivered: a kick still on the list, or
    its delivery still holding the lock, would make the next message part of a batch or a
    hand-off, not a lone delivery."""
    k = bus.store.k
    wait_for(
        lambda: (
            not bus.store.r.llen(k.kick_list(bus.settings.host))
            and not bus.store.r.exists(k.s(sid, "lock"), k.s(sid, "pending"))
        ),
        what="the start's kick delivered",
    )


def killed(doomed: WorkerProcess, what: str) -> None:
    """Wait until ``doomed`` has SIGKILLed itself at its fault point (on a timeout, the
    worker's log says what it did instead)."""
    try:
        wait_for(lambda: any("SIGKILL" in line for line in list(doomed.log)), what=what)
    except AssertionError as exc:
        tail = "".join(list(doomed.log)[-40:])
        raise AssertionError(f"{exc}; the worker's log ends:\n{tail}") from None


def test_a_worker_killed_after_popping_a_kick_leaves_the_message_to_the_sweep(
    settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    from bus.delivery.scheduler import run as run_scheduler

    s, doomed, bus, fallback = doomed_worker(settings, start_worker, "kick:after_pop", "lost")
    lines: list[dict[str, object]] = []
    stop = threading.Event()
    with Listener.for_session(bus.floor, "lost", collect(lines)):
        sent = bus.send({"from": "hosta:me", "to_id": "lost", "text": "popped then killed"})
        killed(doomed, "the pool process killed after its pop")
        assert sent["id"] not in heard_ids(lines)
        assert fallback.calls == []  # the kick went to the list, and is gone with the pop
        doomed.kill()
        start_worker(s)  # the host's worker comes back
        sched_bus, _ = kick_bus(s)
        threading.Thread(target=run_scheduler, args=(sched_bus.delivery, stop), daemon=True).start()
        try:
            wait_for(lambda: sent["id"] in heard_ids(lines), timeout=30, what="the recovery")
        finally:
            stop.set()


def test_a_worker_killed_after_writing_a_lone_notice_s_records_has_it_heard_once(
    settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    s, doomed, bus, _ = doomed_worker(settings, start_worker, "kick:after_ahead", "heard")
    start_kick_delivered(bus, "heard")  # the fault point is a lone notice's
    lines: list[dict[str, object]] = []
    with Listener.for_session(bus.floor, "heard", collect(lines)):
        first = bus.send({"from": "hosta:me", "to_id": "heard", "text": "acked then killed"})
        killed(doomed, "the pool process killed after writing the records and its wait")
        # The records ran when the write arrived: the notice is confirmed, the lock free,
        # so nothing is left in flight for the next holder to send again.
        k = bus.store.k
        assert not bus.store.r.exists(k.s("heard", "notice"))
        assert not bus.store.r.exists(k.s("heard", "lock"))
        assert json.loads(bus.store.r.hget(k.s("heard", "msgs"), first["id"]))["mark"] == "noticed"
        doomed.kill()
        start_worker(s)
        wait_for(lambda: loop_alive(bus), what="the new worker's kick loop")
        second = bus.send({"from": "hosta:me", "to_id": "heard", "text": "after"})
        wait_for(lambda: second["id"] in heard_ids(lines), what="the next message")
    heard = [m for line in lines for m in line["notice"]["messages"]]  # type: ignore[index]
    assert heard == [first["id"], second["id"]]


@pytest.mark.slow
def test_the_kick_loop_carries_on_after_a_redis_restart(
    tmp_path: Path, settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    port = free_port()
    server = EmbeddedRedis(tmp_path / "r.sock", tmp_path / "rdata", port=port).start()
    url = f"redis://:{server.password}@127.0.0.1:{port}/0"
    # Its own standalone server, restarted (also when the suite's store is a cluster).
    s = replace(settings, redis_url=url, broker_url=url, kick="list", redis_cluster=False)
    try:
        worker = start_worker(s)
        bus, fallback = kick_bus(s)
        wait_for(lambda: loop_alive(bus), what="the worker's kick loop")
        bus.open_session("restarted")
        bus.turn("restarted", "start")
        lines: list[dict[str, object]] = []
        with Listener.for_session(bus.floor, "restarted", collect(lines)):
            first = bus.send({"from": "hosta:me", "to_id": "restarted", "text": "before"})
            wait_for(lambda: first["id"] in heard_ids(lines), what="the message before")
            server.stop()
            server.start()
            back = time.monotonic()
            gone = False
            while not gone:  # the first command on a dead pooled connection may fail
                try:
                    bus.store.r.delete(bus.store.k.kick_alive(s.host))
                    gone = True
                except redis.RedisError:
                    assert time.monotonic() - back < 30
            # The loop reconnects and says it is alive again.
            wait_for(lambda: loop_alive(bus), timeout=30, what="the loop after the restart")
            nxt = bus.send({"from": "hosta:me", "to_id": "restarted", "text": "after"})
            wait_for(lambda: nxt["id"] in heard_ids(lines), timeout=30, what="the message after")
        assert fallback.calls == []
        assert worker.proc.poll() is None
    finally:
        server.stop()


def test_a_loop_beats_while_it_delivers_a_long_batch(
    make_bus: Callable[..., Bus], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A batch longer than the beat's staleness (a loaded machine) must not look dead:
    # another loop would put its kicks back and deliver them again.
    from bus.delivery import kick_list
    from tests.support.sessions import idle_with_blockers

    b = make_bus()
    sids = [f"lb{i}" for i in range(70)]  # two chunks
    idle_with_blockers(b, sids)
    monkeypatch.setattr(kick_list, "BEAT_S", 0.0)  # every progress call beats
    beats: list[str] = []
    real = b.store.delivery.kick_beat
    monkeypatch.setattr(
        b.store.delivery,
        "kick_beat",
        lambda host, loop, ms: (beats.append(loop), real(host, loop, ms)),
    )
    loop = kick_list.KickLoop(b.delivery)
    assert loop._deliver(sids, loop._beater(b.store, "l1"))
    assert len(beats) >= 2 and set(beats) == {"l1"}  # during the batch, not only between


class _Gate:
    """A loop's gate, its refused tries counted (another loop held it)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.refused = 0

    def acquire(self, timeout: float = -1) -> bool:
        got = self.lock.acquire(timeout=timeout)
        if not got:
            self.refused += 1
        return got

    def release(self) -> None:
        self.lock.release()


def test_a_process_runs_one_batch_at_a_time_and_leaves_the_rest_on_the_list(
    make_bus: Callable[..., Bus], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its loops share one GIL: two batches interleaved cost more CPU a session than one
    # after the other, so kicks that come while a batch runs wait for it (or go to the
    # host's other processes), not to a second batch of this process.
    from bus.delivery import kick_list

    b = make_bus()
    store, host = b.store, b.settings.host
    monkeypatch.setattr(kick_list, "BEAT_S", 0.02)  # the gate's wait: loops look again often
    running: list[list[str]] = []
    batches: list[list[str]] = []
    hold = threading.Event()

    def deliver_many(
        _parts: DeliveryParts, sids: list[str], progress: object = None, defer: object = None
    ) -> list[object]:
        running.append(sids)
        batches.append(list(sids))
        try:
            assert len(running) == 1, f"two batches at once: {running}"
            hold.wait(15)
        finally:
            running.remove(sids)
        return []

    monkeypatch.setattr(kick_list, "deliver_many", deliver_many)
    loop = kick_list.KickLoop(b.delivery, threads=3)
    gate = loop._gate = _Gate()  # type: ignore[assignment]
    store.delivery.kick_beat(host, "seed", 3000)  # alive: the pushes go on the list
    assert store.delivery.push_kicks(host, ["a", "b", "c"])
    loop.start()
    try:
        wait_for(lambda: batches == [["a", "b", "c"]], 10, "the first batch")
        assert store.delivery.push_kicks(host, ["d", "e"])
        refused = gate.refused
        wait_for(
            lambda: gate.refused >= refused + 4 or len(batches) > 1,
            10,
            "the other loops refused the gate (or took a batch of their own)",
        )
        assert len(batches) == 1
        assert store.r.lrange(store.k.kick_list(host), 0, -1) == ["d", "e"]  # left waiting
        hold.set()
        wait_for(lambda: len(batches) == 2, 10, "the second batch")
        assert batches[1] == ["d", "e"]  # together, as one batch
    finally:
        hold.set()
        loop.stop()


def test_a_burst_on_a_quiet_list_is_one_lone_kick_and_one_batch_not_a_lone_kick_a_loop(
    make_bus: Callable[..., Bus], monkeypatch: pytest.MonkeyPatch
) -> None:
    # One loop of a process waits on the list at a time: a burst wakes that one alone
    # (each lone kick costs several times a batched session), the rest go as a batch.
    from bus.delivery import kick_list

    b = make_bus()
    store, host = b.store, b.settings.host
    monkeypatch.setattr(kick_list, "BEAT_S", 0.05)
    batches: list[list[str]] = []
    waiting: list[int] = [0, 0]  # now, most at once
    listening = threading.Event()
    real_wait = store.delivery.wait_kick

    def wait_kick(*args: object, **kw: bool) -> tuple[list[str], int]:
        waiting[0] += 1
        waiting[1] = max(waiting)
        listening.set()
        try:
            return real_wait(*args, **kw)  # type: ignore[arg-type]
        finally:
            waiting[0] -= 1

    def deliver_many(
        _parts: DeliveryParts, sids: list[str], progress: object = None, defer: object = None
    ) -> list[object]:
        batches.append(list(sids))
        return []

    beats: list[str] = []
    real_beat = store.delivery.kick_beat
    monkeypatch.setattr(
        store.delivery, "kick_beat", lambda h, lp, ms: (beats.append(lp), real_beat(h, lp, ms))
    )
    monkeypatch.setattr(store.delivery, "wait_kick", wait_kick)
    monkeypatch.setattr(kick_list, "deliver_many", deliver_many)
    loop = kick_list.KickLoop(b.delivery, threads=4).start()
    try:
        assert listening.wait(10)
        # Settled: every loop has been round its pop once (beaten twice), or a second's
        # BLMOVE timed out (where every loop waits on the list, each beats once a BLOCK_S).
        wait_for(
            lambda: sum(1 for lp in set(beats) if beats.count(lp) >= 2) >= 3,
            10,
            "the loops settled",
        )
        burst = [f"k{i}" for i in range(10)]
        assert store.delivery.push_kicks(host, burst)
        wait_for(lambda: sum(map(len, batches)) >= len(burst), 10, "the burst delivered")
        assert sum(1 for batch in batches if len(batch) == 1) <= 1, batches
        assert len(batches) <= 2, batches
        assert sorted(x for batch in batches for x in batch) == sorted(burst)
        assert waiting[1] == 1  # never two loops of the process on BLMOVE
    finally:
        loop.stop()


def test_an_idle_process_s_other_loops_wait_for_the_listener_not_the_clock(
    make_bus: Callable[..., Bus], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Polling the list every BEAT_S, four idle loops of 1,010 sessions' hosts cost a few
    # script calls a second each: the loops that do not listen wait for the one that does.
    from bus.delivery import kick_list

    b = make_bus()
    store, host = b.store, b.settings.host
    monkeypatch.setattr(kick_list, "LISTEN_WAIT_S", 60.0)  # no bounded wake in the test
    takes: list[str] = []
    quiet = [0]
    real_take, real_wait = store.delivery.take_kicks, store.delivery.wait_kick

    def take_kicks(h: str, lp: str, n: int, *, clear: bool = False) -> list[str]:
        takes.append(lp)
        return real_take(h, lp, n, clear=clear)

    in_blmove: list[float] = []  # when the listener's BLMOVE began, while it waits

    def wait_kick(*args: object, **kw: bool) -> tuple[list[str], int]:
        in_blmove.append(time.monotonic())
        try:
            got = real_wait(*args, **kw)  # type: ignore[arg-type]
        finally:
            in_blmove.clear()
        quiet[0] += not got[0]
        return got

    delivered: list[list[str]] = []
    monkeypatch.setattr(store.delivery, "take_kicks", take_kicks)
    monkeypatch.setattr(store.delivery, "wait_kick", wait_kick)
    monkeypatch.setattr(
        kick_list,
        "deliver_many",
        lambda _b, sids, progress=None, defer=None: delivered.append(sids),
    )
    loop = kick_list.KickLoop(b, threads=4).start()
    try:
        wait_for(lambda: quiet[0] >= 4, 30, "four quiet BLMOVEs")
        # One look a loop at the start; then the listener listens again after each quiet
        # BLMOVE, with no look between (a look a second was a script call a second).
        assert len(takes) <= 4, (len(takes), quiet[0])

        # A kick heard: the listener listens again at once, its BLMOVE's round trip
        # saying whether a burst waits behind it; nobody looks at the list (each loop
        # woken to look at the empty list cost a script call: four a lone kick once,
        # then two, then one: the listener's own look).
        # Pushed while the listener's BLMOVE has most of its second left, so the listener
        # hears it (pushed as it looked at the list between two BLMOVEs, it would take it
        # from the list as a batch, which wakes nobody).
        def fresh_blmove() -> bool:
            began = list(in_blmove)
            return bool(began) and time.monotonic() - began[0] < 0.3

        wait_for(fresh_blmove, 10, "the listener in a fresh BLMOVE")
        before = len(takes)
        assert store.delivery.push_kicks(host, ["one"])
        wait_for(lambda: delivered == [["one"]], 10, "the kick delivered")
        settled = quiet[0]
        wait_for(lambda: quiet[0] > settled, 10, "the next listener's quiet BLMOVE")
        assert takes[before:] == []
    finally:
        loop.stop()


def test_a_loops_taken_kicks_and_a_dispatch_flag_go_without_a_pipeline_on_a_cluster(
    cluster_settings: Settings, make_bus: Callable[..., Bus], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A cluster client's delete() splits its keys by slot through a pipeline of its own:
    # for one key, on every delivery loop's turn, that was a pipeline's cost for nothing.
    store = make_bus(redis_url=cluster_settings.redis_url, redis_cluster=True).store
    taken, flag = store.k.kick_taken("hosta", "0"), store.k.s("s1", "pending")
    store.r.rpush(taken, "s1")
    assert store.queue.mark_pending("s1")

    def no_pipeline(*_a: object, **_k: object) -> None:
        pytest.fail("a pipeline for one key")

    monkeypatch.setattr(store.r, "pipeline", no_pipeline)
    store.delivery.done_kicks("hosta", "0")
    store.queue.clear_pending("s1")
    assert [store.r.execute_command("EXISTS", key) for key in (taken, flag)] == [0, 0]


def test_a_take_empties_the_loop_s_delivered_kicks_in_the_same_call(
    make_bus: Callable[..., Bus],
) -> None:
    store = make_bus().store
    taken = store.k.kick_taken("hosta", "L")
    store.r.rpush(taken, "old")  # delivered, still on the loop's taken list
    store.delivery.kick_alive("hosta", 3000)
    assert store.delivery.push_kicks("hosta", ["new"])
    assert store.delivery.take_kicks("hosta", "L", 8) == ["new"]
    assert store.r.lrange(taken, 0, -1) == ["old", "new"]
    store.r.delete(taken)
    store.r.rpush(taken, "old")
    assert store.delivery.push_kicks("hosta", ["newer"])
    assert store.delivery.take_kicks("hosta", "L", 8, clear=True) == ["newer"]
    assert store.r.lrange(taken, 0, -1) == ["newer"]
    assert store.delivery.take_kicks("hosta", "L", 8, clear=True) == []
    assert store.r.llen(taken) == 0


def test_a_lone_kick_costs_no_separate_done_when_a_take_follows(
    make_bus: Callable[..., Bus], monkeypatch: pytest.MonkeyPatch
) -> None:
    from bus.delivery import kick_list

    b = make_bus()
    store, host = b.store, b.settings.host
    dones: list[str] = []
    clears: list[bool] = []
    real_take, real_done = store.delivery.take_kicks, store.delivery.done_kicks

    def take_kicks(h: str, lp: str, n: int, *, clear: bool = False) -> list[str]:
        clears.append(clear)
        return real_take(h, lp, n, clear=clear)

    def done_kicks(h: str, lp: str) -> None:
        dones.append(lp)
        real_done(h, lp)

    real_wait = store.delivery.wait_kick

    def wait_kick(*args: Any, clear: bool = False) -> tuple[list[str], int]:
        clears.append(clear)
        return real_wait(*args, clear=clear)

    delivered: list[list[str]] = []
    monkeypatch.setattr(store.delivery, "take_kicks", take_kicks)
    monkeypatch.setattr(store.delivery, "wait_kick", wait_kick)
    monkeypatch.setattr(store.delivery, "done_kicks", done_kicks)
    monkeypatch.setattr(
        kick_list,
        "deliver_many",
        lambda _b, sids, progress=None, defer=None: delivered.append(sids),
    )
    loop = kick_list.KickLoop(b, threads=1).start()
    try:
        wait_for(lambda: clears, 10, "the loop's first look")
        for n in range(3):
            assert store.delivery.push_kicks(host, [f"s{n}"])
            wait_for(lambda n=n: len(delivered) == n + 1, 10, "the kick delivered")
            # The listener's next BLMOVE empties it in its own round trip.
            wait_for(lambda: True in clears, 10, "the next BLMOVE emptying the taken list")
            wait_for(
                lambda: (
                    not any(
                        store.r.lrange(k, 0, -1)
                        for k in store.r.keys(f"{b.settings.key_prefix}:*taken*")
                    )
                ),
                10,
                "the taken list emptied",
            )
            clears.clear()
        assert dones == []  # no DEL of its own: each went with the next BLMOVE
    finally:
        loop.stop()
    assert delivered == [["s0"], ["s1"], ["s2"]]


def test_a_loop_that_looked_before_the_listener_heard_a_kick_looks_again_not_listens(
    make_bus: Callable[..., Bus], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A burst pushed while a loop is between its look and its BLMOVE: the listener hears
    # the first kick; this loop, once it has the listening lock, must look at the list
    # again (the rest as one batch), not BLMOVE the burst one kick at a time.
    from bus.delivery import kick_list

    b = make_bus()
    store = b.store
    loop = kick_list.KickLoop(b.delivery, threads=1)  # not started: _pop driven here
    listened: list[int] = []
    real_take = store.delivery.take_kicks

    def take_heard_meanwhile(h: str, lp: str, n: int, *, clear: bool = False) -> list[str]:
        got = real_take(h, lp, n, clear=clear)
        loop._heard_n += 1  # the listener heard a kick while this loop looked
        return got

    def wait_kick(*_args: object, **_kw: bool) -> tuple[list[str], int]:
        listened.append(1)
        return [], 0

    monkeypatch.setattr(store.delivery, "wait_kick", wait_kick)
    monkeypatch.setattr(store.delivery, "take_kicks", take_heard_meanwhile)
    assert loop._pop(store, None, "L", False) == ([], None, True)
    assert listened == [] and not loop._listen.locked() and not loop._gate.locked()
    monkeypatch.setattr(store.delivery, "take_kicks", real_take)  # nothing heard meanwhile: listens
    assert loop._pop(store, None, "L", False) == ([], None, True)
    assert listened == [1] and not loop._listen.locked()
