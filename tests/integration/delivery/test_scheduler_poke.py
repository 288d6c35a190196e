"""A sleeping scheduler wakes for an entry due soon (bus.delivery.scheduler, the wake
lateness): it sleeps up to ``max_sleep_s`` between ticks, so without the poke an entry
scheduled less than that ahead of its time waited for the end of the sleep."""

from __future__ import annotations

import threading

import pytest

from bus.api import Bus
from bus.core.models import now_ms
from bus.delivery import scheduler
from bus.delivery.due_taker import Taker
from bus.delivery.host import DeliveryParts
from bus.store.schedule import POKE_WITHIN_MS
from tests.support.waiting import wait_for


def test_an_entry_due_soon_pokes_once_and_one_due_later_does_not(bus: Bus) -> None:
    store, k = bus.store, bus.store.k
    store.schedule.schedule("flush", "far", now_ms() + POKE_WITHIN_MS + 60_000)
    store.schedule.schedule_many("due", [("far2", now_ms() + POKE_WITHIN_MS + 60_000)])
    assert store.r.llen(k.due_soon) == 0
    assert store.schedule.wait_poked(0.01) is False
    store.schedule.schedule("retry", "soon", now_ms() + 100)
    store.schedule.schedule_many("due", [("a", now_ms() + 60_000), ("b", now_ms() + 50)])
    store.schedule.schedule("due", "c", now_ms() - 5)  # already due
    assert store.r.llen(k.due_soon) == 1  # a burst of pokes wakes the scheduler once
    assert store.schedule.wait_poked(0.01) is True
    assert store.schedule.wait_poked(0.01) is False
    # The entries themselves are scheduled as before.
    assert store.r.zscore(k.due, "due|b") is not None
    assert store.r.zscore(k.due, "retry|soon") is not None


def test_a_sleeping_scheduler_takes_an_entry_scheduled_due_soon(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    bus.open_session("s1", host="h1")
    ticked = threading.Event()

    class Pokes(scheduler.Pokes):
        def listening(self, on: bool) -> None:  # the end of a tick: the loop sleeps next
            super().listening(on)
            ticked.set()

    monkeypatch.setattr(scheduler, "Pokes", Pokes)

    def pokers() -> int:
        return sum(1 for t in threading.enumerate() if t.name == "scheduler-pokes")

    before = pokers()
    stop = threading.Event()
    # A cap far longer than the wait below: the entry is taken only if the poke wakes it.
    loop = threading.Thread(
        target=scheduler.run, args=(bus.delivery, stop), kwargs={"max_sleep_s": 60.0}, daemon=True
    )
    loop.start()
    try:
        assert ticked.wait(15), "the scheduler never ticked"
        bus.store.schedule.schedule("retry", "s1", now_ms() + 50)
        wait_for(lambda: ("h1", "s1") in bus.dispatcher.calls, 10, "the entry dispatched")
        assert bus.store.r.zscore(bus.store.k.due, "retry|s1") is None  # taken
    finally:
        stop.set()
        bus.store.schedule.poke_scheduler(0)  # ends the sleep now
        loop.join(5)
    assert not loop.is_alive()
    assert pokers() == before  # its poke thread ended with it


class _Waits(threading.Event):
    """The loop's sleep event, its waits recorded (each in order with the ticks)."""

    def __init__(self, log: list[object]) -> None:
        super().__init__()
        self.log = log

    def wait(self, timeout: float | None = None) -> bool:
        self.log.append(("wait", timeout))
        return super().wait(0)  # the sleep itself not needed: the order is the point


@pytest.mark.parametrize(
    ("taken", "after_first"),
    [
        (3, "tick"),  # entries fell due while the tick ran: straight on, no 10 ms step
        (0, ("wait", 0.01)),  # due already yet none taken: a short wait, no busy loop
    ],
)
def test_a_scheduler_whose_next_entry_is_already_due_ticks_again_at_once_if_it_took_some(
    bus: Bus, monkeypatch: pytest.MonkeyPatch, taken: int, after_first: object
) -> None:
    log: list[object] = []
    stop = threading.Event()

    def tick(_parts: DeliveryParts, *, taker: Taker, **_: object) -> dict[str, int]:
        log.append("tick")
        if log.count("tick") >= 2:
            stop.set()
        taker.holds, taker.next_due = True, now_ms() - 1  # the taker, its next entry due
        return {"taken": taken}

    monkeypatch.setattr(scheduler, "tick", tick)

    class Pokes(scheduler.Pokes):
        def __init__(self, b: DeliveryParts, s: threading.Event) -> None:
            super().__init__(b, s)
            self.poked = _Waits(log)

    monkeypatch.setattr(scheduler, "Pokes", Pokes)
    loop = threading.Thread(target=scheduler.run, args=(bus.delivery, stop), daemon=True)
    loop.start()
    loop.join(15)
    assert not loop.is_alive()
    assert log[0] == "tick" and log[1] == after_first
