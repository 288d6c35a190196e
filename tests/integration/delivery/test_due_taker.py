"""One scheduler at a time takes the due entries (bus.delivery.due_taker): the claim in
``take_due.lua`` on both backends, the others' looks without round trips, and two real
scheduler loops on one prefix handing the entries over when the taker stops."""

# ruff: noqa: F811  (the store fixture, imported from tests.support.store_backends)
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from bus.api import Bus
from bus.core.models import now_ms
from bus.delivery import scheduler
from bus.delivery.dispatch import RecordingDispatcher
from bus.delivery.due_taker import CLAIM_MS, Taker, taker_name
from bus.store.store import Store
from tests.support.store_backends import store  # noqa: F401  (the fixture)
from tests.support.waiting import wait_for


def test_only_the_claim_s_holder_takes_and_each_take_renews_it(store: Store) -> None:
    store.schedule.schedule("due", "s1", 1000)
    store.schedule.schedule("due", "s2", 2000)
    store.schedule.schedule("retry", "s3", 9000)
    two = Store(store.r, store.k)  # the other scheduler's process
    taken, left, nxt = store.schedule.take_due_as("one", 1500, 1500)
    assert (taken, left, nxt) == ([("due", "s1")], 0, 2000)
    got, left, nxt = two.schedule.take_due_as("two", 1500, 5000)  # s2 is due: not two's to take
    assert got == [] and 0 < left <= 1500 and nxt is None
    assert store.schedule.next_due() == 2000
    assert store.r.pttl(store.k.due_taker) > 0
    assert store.schedule.take_due_as("one", 1500, 5000) == ([("due", "s2")], 0, 9000)  # renewed
    assert two.schedule.release_taker("two") is False  # not two's to give up
    assert store.schedule.release_taker("one") is True
    two.schedule.claim_clock = lambda: time.monotonic() + 1.5  # type: ignore[method-assign]
    assert two.schedule.take_due_as("two", 1500, 9000) == ([("retry", "s3")], 0, None)


def test_a_scheduler_s_restart_takes_the_claim_at_once_and_another_host_s_waits(
    store: Store,
) -> None:
    name = taker_name("h1", "/home/a/.local/share/inbox")
    store.schedule.schedule("due", "s1", 1000)
    assert store.schedule.take_due_as(name, 1500, 0)[1] == 0  # the scheduler, before its kill
    restarted = taker_name("h1", "/home/a/.local/share/inbox")  # its restart, or the spare
    assert store.schedule.take_due_as(restarted, 1500, 1000)[:2] == ([("due", "s1")], 0)
    assert store.schedule.take_due_as(taker_name("h2", "/home/b"), 1500, 1000)[1] > 0


def test_a_scheduler_that_does_not_hold_the_claim_looks_again_once_it_can_have_lapsed(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = Store(store.r, store.k)  # another host's scheduler
    assert other.schedule.take_due_as(taker_name("h2", "/b"), 1200, 0)[1] == 0
    calls: list[str] = []
    real = store.script

    def script(name: str) -> Any:
        calls.append(name)
        return real(name)

    clock = [100.0]
    monkeypatch.setattr(store, "script", script)
    monkeypatch.setattr(store.schedule, "claim_clock", lambda: clock[0])
    taker = Taker(taker_name("h1", "/a"), claim_ms=1200)
    assert taker.take(store, now_ms()) == [] and not taker.holds and taker.next_due is None
    assert calls == ["take_due"]  # asked once: held, with its time left
    for step in (0.1, 0.5, 0.5):  # its ticks within the 1.2 s: no round trip
        clock[0] += step
        assert taker.take(store, now_ms()) == []
    assert calls == ["take_due"]
    store.r.delete(store.k.due_taker)  # the other's claim lapsed (its host went)
    store.schedule.schedule("due", "s1", 0)
    clock[0] += 0.11
    assert taker.take(store, now_ms()) == [("due", "s1")] and taker.holds
    assert calls == ["take_due", "take_due"]


def _run(b: Bus, stop: threading.Event) -> threading.Thread:
    t = threading.Thread(target=scheduler.run, args=(b.delivery, stop), daemon=True)
    t.start()
    return t


def test_of_two_schedulers_one_takes_the_entries_and_the_other_takes_over_when_it_stops(
    make_bus: Callable[..., Bus],
) -> None:
    a_calls, b_calls = RecordingDispatcher(), RecordingDispatcher()
    # Two hosts' schedulers (their names in the claim differ).
    a = make_bus(dispatcher=a_calls, host="ha")
    b = make_bus(dispatcher=b_calls, host="hb")
    sids = [f"t{n}" for n in range(6)]
    for sid in sids:
        a.open_session(sid, host="h1")
    stops = {"a": threading.Event(), "b": threading.Event()}
    loops = {"a": _run(a, stops["a"]), "b": _run(b, stops["b"])}
    try:
        for n, sid in enumerate(sids):
            a.store.schedule.schedule("due", sid, now_ms() + 20 * n)
        wait_for(lambda: len(a_calls.calls) + len(b_calls.calls) >= len(sids), 15, "all taken")
        # One scheduler took them all, each once: the other did not race it for each.
        first, second = ("a", "b") if a_calls.calls else ("b", "a")
        calls = {"a": a_calls, "b": b_calls}
        assert sorted(sid for _h, sid in calls[first].calls) == sids
        assert calls[second].calls == []
        stops[first].set()  # it stops (and gives the claim up)
        a.store.schedule.poke_scheduler(0)
        loops[first].join(10)
        assert not loops[first].is_alive()
        a.store.schedule.schedule("due", "t0", now_ms())
        # The other takes over at its next look: within a claim's time and a sleep.
        wait_for(lambda: calls[second].calls != [], CLAIM_MS / 1000 + 10, "taken over")
        assert calls[second].calls == [("h1", "t0")]
    finally:
        for stop in stops.values():
            stop.set()
        a.store.schedule.poke_scheduler(0)
        for loop in loops.values():
            loop.join(10)
