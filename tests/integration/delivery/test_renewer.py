"""The process's batch lease renewer: which leases a pass extends, and what it does with
the answers (a fake store: the renewer's only Redis call is ``extend_many``); then a real
batch whose leases outlive their TTL."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import pytest

from bus.delivery.lease import Lease
from bus.delivery.renewer import Renewer, renewer_for
from bus.store.redis_errors import StoreFailed


class FakeStore:
    lock_ttl_ms = 3000

    def __init__(self, answers: dict[str, bool] | None = None, fail: bool = False) -> None:
        self.asked: list[list[tuple[str, str]]] = []
        self.answers = answers or {}
        self.fail = fail
        self.delivery = self  # the store's delivery aggregate: extend_many is all it uses

    def extend_many(self, items: list[tuple[str, str]]) -> list[bool]:
        self.asked.append(items)
        if self.fail:
            raise StoreFailed("down")
        return [self.answers.get(sid, True) for sid, _ in items]


@dataclass
class Run:
    lease: Lease
    done: bool = False


def _runs(store: Any, *sids: str) -> list[Run]:
    return [Run(Lease(store, sid, f"tok-{sid}")) for sid in sids]


def test_a_young_batch_is_not_renewed_an_old_one_is() -> None:
    store = FakeStore()
    renewer = Renewer(store, interval=1.0)  # type: ignore[arg-type]
    young = renewer.add(_runs(store, "a"))
    assert renewer.renew_due() == 0 and store.asked == []
    renewer._batches[young] = (time.monotonic() - 0.6, renewer._batches[young][1])
    assert renewer.renew_due() == 1
    assert store.asked == [[("a", "tok-a")]]


def _aged(renewer: Renewer, runs: list[Run]) -> int:
    handle = renewer.add(runs)
    renewer._batches[handle] = (time.monotonic() - 10, runs)
    return handle


@pytest.mark.parametrize(
    ("done", "lost", "refused", "asked", "lost_after"),
    [
        # (runs done, leases lost before, leases the server refuses) -> asked, lost after
        ((), (), (), ["a", "b"], set()),
        (("a",), (), (), ["b"], set()),
        ((), ("b",), (), ["a"], {"b"}),
        ((), (), ("b",), ["a", "b"], {"b"}),
        (("a", "b"), (), (), [], set()),
    ],
)
def test_a_pass_extends_the_live_leases_and_loses_the_refused(
    done: tuple[str, ...],
    lost: tuple[str, ...],
    refused: tuple[str, ...],
    asked: list[str],
    lost_after: set[str],
) -> None:
    store = FakeStore(answers=dict.fromkeys(refused, False))
    renewer = Renewer(store, interval=1.0)  # type: ignore[arg-type]
    runs = _runs(store, "a", "b")
    for run in runs:
        run.done = run.lease.sid in done
        if run.lease.sid in lost:
            run.lease.confirmed(False, 0.0)
    _aged(renewer, runs)
    renewer.renew_due()
    assert [sid for sid, _ in (store.asked[0] if store.asked else [])] == asked
    assert {r.lease.sid for r in runs if r.lease.lost} == lost_after


def test_a_removed_batch_is_not_renewed_and_a_blip_loses_nothing() -> None:
    store = FakeStore(fail=True)
    renewer = Renewer(store, interval=1.0)  # type: ignore[arg-type]
    runs = _runs(store, "a")
    handle = _aged(renewer, runs)
    assert renewer.renew_due() == 0  # Redis away: tried, nothing lost
    assert not runs[0].lease.lost and len(store.asked) == 1
    renewer.remove(handle)
    assert renewer.renew_due() == 0 and len(store.asked) == 1


def test_one_renewer_a_store() -> None:
    a, b = FakeStore(), FakeStore()
    assert renewer_for(a) is renewer_for(a)  # type: ignore[arg-type]
    assert renewer_for(a) is not renewer_for(b)  # type: ignore[arg-type]
    assert renewer_for(a).interval == pytest.approx(1.0)  # type: ignore[arg-type]


def test_the_thread_renews_a_long_batch_then_ends_when_idle() -> None:
    store = FakeStore()
    renewer = Renewer(store, interval=0.02)  # type: ignore[arg-type]
    runs = _runs(store, "a")
    handle = renewer.add(runs)
    thread = renewer._thread
    assert thread is not None
    deadline = time.monotonic() + 10
    while len(store.asked) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(store.asked) >= 2, "the thread renewed the batch on its own"
    renewer.remove(handle)
    thread.join(10)
    assert not thread.is_alive() and renewer._thread is None
