"""The compaction pass looks at a thread's log only while it may be unsettled: an idle
registry's passes cost per session, not per thread (bus.store.compaction.threads_floor)."""

from __future__ import annotations

from typing import Any

import pytest

from bus.api import Bus
from bus.store import compaction
from bus.store.compaction import FULL_EVERY, SETTLED_MS, SKEW_MS, compact_all, threads_floor

DONE = 5_000_000


@pytest.fixture
def passes(bus: Bus, monkeypatch: pytest.MonkeyPatch) -> Bus:
    """``bus`` with a fresh record of this process's passes, a pass at every call (its
    claim granted, no gap between ticks)."""
    for name in ("_left", "_next", "_started", "_done_from", "_passes", "_threads_from"):
        monkeypatch.setattr(compaction, name, {})
    monkeypatch.setattr(compaction, "GAP_S", 0.0)
    monkeypatch.setattr(bus.store.schedule, "claim_sweep", lambda *a, **kw: True)
    return bus


@pytest.mark.parametrize(
    ("done_from", "n", "full", "want"),
    [
        (None, 1, False, 0),  # a process's first pass: every thread
        (None, 2, False, 0),  # no pass completed yet: every thread
        (DONE, 2, False, DONE - SETTLED_MS - SKEW_MS),  # those the last pass may have left
        (DONE, FULL_EVERY, False, 0),  # every FULL_EVERY-th pass: every thread again
        (DONE, 2 * FULL_EVERY + 1, False, DONE - SETTLED_MS - SKEW_MS),
        (DONE, 3, True, 0),  # a forced pass: every thread
        (10, 2, False, 0),  # never below 0 (the ids' ages are negative scores)
    ],
)
def test_which_threads_a_pass_looks_at(
    done_from: int | None, n: int, full: bool, want: int
) -> None:
    assert threads_floor(done_from, n, full=full) == want


def test_a_pass_after_a_completed_one_skips_the_logs_it_found_settled(
    passes: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    bus = passes
    store, k = bus.store, bus.store.k
    bus.open_session("coord")
    bus.turn("coord", "start")
    for text in ("one", "two"):
        bus.send({"from": f"ha:{text}", "to_id": "coord", "text": text, "class": "action"})
    bus.deliver_session("coord")
    old, new = sorted(store.inbox.threads_of("coord"))
    store.r.zadd(k.s("coord", "threads"), {old: 1000})  # its last message long ago
    looked: list[list[str]] = []
    real = store.events.compact_streams
    monkeypatch.setattr(
        store.events,
        "compact_streams",
        lambda keys, *a: (looked.append(list(keys)), real(keys, *a))[1],
    )
    logs = lambda: {key for key in looked[-1] if key.endswith(":log")}  # noqa: E731
    compact_all(store)  # the first pass: every thread's log
    assert logs() == {k.t(old, "log"), k.t(new, "log")}
    compact_all(store)  # after a completed pass: the old thread's log is not looked at
    assert logs() == {k.t(new, "log")}
    assert k.s("coord", "events") in looked[-1]  # the session's own streams still are
    compact_all(store, force=True)  # forced: every log
    assert logs() == {k.t(old, "log"), k.t(new, "log")}


def test_every_full_every_th_pass_looks_at_every_log(
    passes: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    bus = passes
    store, k = bus.store, bus.store.k
    bus.open_session("solo")
    bus.turn("solo", "start")
    bus.send({"from": "ha:x", "to_id": "solo", "text": "hi", "class": "action"})
    bus.deliver_session("solo")
    [thread] = store.inbox.threads_of("solo")
    store.r.zadd(k.s("solo", "threads"), {thread: 1000})
    counts: list[int] = []
    real = store.events.compact_streams

    def record(keys: list[str], *a: Any) -> int:
        counts.append(sum(key.endswith(":log") for key in keys))
        return real(keys, *a)

    monkeypatch.setattr(store.events, "compact_streams", record)
    for _ in range(FULL_EVERY):
        compact_all(store)
    assert counts == [1] + [0] * (FULL_EVERY - 2) + [1]
