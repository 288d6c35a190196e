"""bus/delivery/engine.py: a delivery that finds the session busy hands its work to the holder."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from bus.api import Bus
from bus.core.models import now_ms
from tests.support.listeners import collect


def test_a_busy_delivery_hands_off_and_the_holder_takes_the_late_message(
    make_bus: Callable[..., Bus], monkeypatch: pytest.MonkeyPatch
) -> None:
    from bus.surfaces.harness.listener import Listener

    b = make_bus()
    b.open_session("s")
    b.turn("s", "start")
    got: list[dict[str, Any]] = []
    listener = Listener.for_session(b.floor, "s", collect(got)).start()
    inside, release = threading.Event(), threading.Event()
    real = b.inbox.notices.send
    calls = 0

    def slow_send(*args: Any, **kw: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:  # the first delivery, past its last read, holds the lock here
            inside.set()
            assert release.wait(10)
        real(*args, **kw)

    monkeypatch.setattr(b.inbox.notices, "send", slow_send)
    first = b.send({"from": "hosta:me", "to_id": "s", "text": "first"})
    reports: list[Any] = []
    holder = threading.Thread(target=lambda: reports.append(b.deliver_session("s")))
    holder.start()
    try:
        assert inside.wait(10)
        late = b.send({"from": "hosta:me", "to_id": "s", "text": "late"})
        busy = b.deliver_session("s")  # what the late send's dispatch runs: returns at once
        assert busy.busy and busy.inbox == 0
        assert b.store.r.get(b.store.k.s("s", "again")) == "1"
    finally:
        release.set()
        holder.join(10)
        listener.stop()
    [report] = reports
    assert not report.busy and report.inbox == 2  # the holder ran again for the late one
    assert [n["notice"]["messages"] for n in got] == [[first["id"]], [late["id"]]]
    assert b.store.queue.backlog("s") == 0 and not b.store.r.exists(b.store.k.s("s", "again"))


def test_without_a_hand_off_a_delivery_runs_once(make_bus: Callable[..., Bus]) -> None:
    b = make_bus()
    b.open_session("s")
    b.send({"from": "hosta:me", "to_id": "s", "text": "one"})
    report = b.deliver_session("s")
    assert not report.busy and report.raw + report.inbox == 1
    assert not b.store.r.exists(b.store.k.s("s", "again"))


def test_a_hand_off_to_a_holder_that_never_returns_is_kicked_when_its_lease_ends(
    make_bus: Callable[..., Bus],
) -> None:
    b = make_bus()
    b.open_session("s")
    assert b.store.delivery.lock("s") is not None  # a holder that died: it never renews or unlocks
    b.send({"from": "hosta:me", "to_id": "s", "text": "behind a dead holder"})
    before = now_ms()
    assert b.deliver_session("s").busy
    due = b.store.r.zscore(b.store.k.due, "lease|s")
    assert due is not None and due >= before + b.store.lock_ttl_ms
