"""A wake no harness takes: the session is idle again ``INBOX_WAKE_TURN_TIMEOUT_S`` after
it, not ``running`` for ever; a wake whose turn began is left alone. Time is moved on an
injected clock, never slept."""

from __future__ import annotations

import time
from collections.abc import Callable

from bus.api import Bus
from bus.core.clock import ManualClock
from bus.delivery.dispatch import RecordingDispatcher
from bus.delivery.scheduler import tick
from bus.store.schedule import WAKE_TURN
from tests.support.celery_bus import events

TIMEOUT_S = 30.0


def woken(make_bus: Callable[..., Bus], sid: str) -> tuple[Bus, ManualClock, RecordingDispatcher]:
    """A session with no harness, woken by a blocker (its debounce passed on the clock)."""
    clock = ManualClock(int(time.time() * 1000))
    rec = RecordingDispatcher()
    b = make_bus(clock=clock, dispatcher=rec, wake_turn_timeout_s=TIMEOUT_S)
    b.open_session(sid)
    b.send({"from": "h:peer", "to_id": sid, "text": "help", "class": "blocker"})
    b.deliver_session(sid)  # plans the debounced wake
    clock.advance(int(b.settings.wake_debounce_s * 1000) + 1000)
    tick(b.delivery, sweep=False, clock=clock)
    b.deliver_session(sid)  # the due wake: a notice on the floor, the session running
    assert events(b, sid, "wake")
    info = b.store.sessions.get_session(sid)
    assert info is not None and info.state == "running" and info.turns == 0
    assert info.woken_at == clock.now_ms()
    rec.calls.clear()
    return b, clock, rec


def state(b: Bus, sid: str) -> str:
    info = b.store.sessions.get_session(sid)
    assert info is not None
    return info.state


def test_a_wake_no_harness_takes_times_out_to_idle(make_bus: Callable[..., Bus]) -> None:
    b, clock, rec = woken(make_bus, "lone")
    assert b.store.r.zscore(b.store.k.due, f"{WAKE_TURN}|lone") is not None
    clock.advance(int(TIMEOUT_S * 1000) - 1000)
    tick(b.delivery, sweep=False, clock=clock)
    assert state(b, "lone") == "running"  # not yet
    clock.advance(2000)
    tick(b.delivery, sweep=False, clock=clock)
    assert state(b, "lone") == "idle"
    [record] = events(b, "lone", "wake_timeout")
    assert record["woken_at"]
    assert ("hosta", "lone") in rec.calls  # delivered again: what waited may wake it
    # Once: the entry is gone, and another tick changes nothing.
    assert b.store.r.zscore(b.store.k.due, f"{WAKE_TURN}|lone") is None
    clock.advance(int(TIMEOUT_S * 1000))
    tick(b.delivery, sweep=False, clock=clock)
    assert len(events(b, "lone", "wake_timeout")) == 1


def test_a_wake_whose_turn_began_stays_running(make_bus: Callable[..., Bus]) -> None:
    b, clock, rec = woken(make_bus, "taken")
    b.turn("taken", "start")  # the harness took the turn
    rec.calls.clear()  # its own kick
    # Its timeout entry is gone with the wake heard.
    assert b.store.r.zscore(b.store.k.due, f"{WAKE_TURN}|taken") is None
    info = b.store.sessions.get_session("taken")
    assert info is not None and info.woken_at is None
    clock.advance(int(TIMEOUT_S * 1000) + 1000)
    tick(b.delivery, sweep=False, clock=clock)
    assert state(b, "taken") == "running"
    assert not events(b, "taken", "wake_timeout")
    assert ("hosta", "taken") not in rec.calls
