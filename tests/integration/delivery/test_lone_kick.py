"""A lone send's path: a kick the loop waited for is delivered at once, with the kicks
that were waiting behind it when it came (its round trip says how many); the kicks
already waiting go greedily as one batch (bus.store.kick)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from bus.api import Bus
from tests.support.kicks import pop_kicks
from tests.support.trips import RoundTrips


def test_a_kick_waited_for_comes_with_those_behind_it_and_those_waiting_come_together(
    make_bus: Callable[..., Bus], monkeypatch: pytest.MonkeyPatch
) -> None:
    b = make_bus()
    store, host = b.store, b.settings.host
    kicks, taken = store.k.kick_list(host), store.k.kick_taken(host, "l1")
    client, pool = store.delivery.kick_client(0.5, "test-kick")
    real = client.pipeline
    blocked: list[str] = []

    def pipeline(*args: Any, **kw: Any) -> Any:
        pipe = real(*args, **kw)
        sent = pipe.execute

        def execute(*a: Any, **k: Any) -> Any:
            # Three kicks land just as the loop starts waiting: it wakes with the first.
            blocked.append("x")
            store.r.rpush(kicks, "a", "b", "c")
            return sent(*a, **k)

        pipe.execute = execute
        return pipe

    monkeypatch.setattr(client, "pipeline", pipeline)
    try:
        # None waiting: the loop waits; the one it woke for comes with the two behind it
        # (the wait's round trip says they are there), up to the count.
        assert pop_kicks(store, client, host, "l1", 0.5, 2) == ["a", "b"]
        assert blocked == ["x"] and store.r.lrange(kicks, 0, -1) == ["c"]
        store.r.rpush(kicks, "d", "e")
        # Kicks waiting: taken together, without waiting.
        assert pop_kicks(store, client, host, "l1", 0.5, 2) == ["c", "d"]
        assert blocked == ["x"]
        assert store.r.lrange(taken, 0, -1) == ["a", "b", "c", "d"]
        assert store.r.lrange(kicks, 0, -1) == ["e"]
    finally:
        if pool is not None:
            pool.disconnect()


def test_a_batch_whose_ingest_script_was_lost_still_notices_what_it_took(
    make_bus: Callable[..., Bus], monkeypatch: pytest.MonkeyPatch
) -> None:
    from redis.exceptions import NoScriptError

    from bus.delivery.engine import deliver_many

    b = make_bus()
    if b.store.cluster:
        pytest.skip("a standalone server's packed pipeline (a cluster sends them apart)")
    b.open_session("s")
    b.turn("s", "start")
    sent = b.send({"from": "hosta:me", "to_id": "s", "text": "x"})
    store = b.store
    real = store.run_packed
    lost: list[int] = []

    def forget_the_ingest(commands: list[tuple[Any, ...]]) -> list[Any]:
        # The server lost the ingest script just before it ran (a flush between two
        # commands of one pipeline): that call answers NOSCRIPT and does nothing, the
        # snapshot behind it runs.
        ingest = store.script("ingest").sha
        at = [n for n, c in enumerate(commands) if c[:2] == ("EVALSHA", ingest)]
        if lost or not at or len(commands) < 2:
            return real(commands)
        lost.append(at[0])
        replies = real([c for n, c in enumerate(commands) if n != at[0]])
        replies.insert(at[0], NoScriptError("NOSCRIPT"))
        return replies

    monkeypatch.setattr(store, "run_packed", forget_the_ingest)
    [report] = deliver_many(b.delivery, ["s"])
    assert lost  # the fault ran
    assert [n["messages"] for n in report.notices] == [1]
    assert [n["notice"]["messages"] for n in b.floor.peek("s")] == [[sent["id"]]]
    assert store.queue.backlog("s") == 0


def test_a_lone_message_from_a_session_is_delivered_in_few_round_trips(
    make_bus: Callable[..., Bus],
    trips: RoundTrips,
) -> None:
    from bus.delivery.engine import deliver_many
    from bus.surfaces.harness.listener import Listener
    from tests.support.listeners import collect

    b = make_bus()
    if b.store.cluster:
        pytest.skip("counts round trips of a standalone server (a cluster splits them)")
    for sid in ("s", "snd"):
        b.open_session(sid)
        b.turn(sid, "start")
    got: list[dict[str, Any]] = []
    listener = Listener.for_session(b.floor, "s", collect(got)).start()
    try:
        for n in range(2):  # the first warms the connections and scripts
            sent = b.send({"from": "hosta:me", "from_session": "snd", "to_id": "s", "text": "x"})
            trips.count, trips.commands = 0, []
            [report] = deliver_many(b.delivery, ["s"])
            assert [n["messages"] for n in report.notices] == [1]
    finally:
        listener.stop()
    assert got[-1]["notice"]["messages"] == [sent["id"]]
    # begin; the wake rules' facts of the sender (the gave set and its session, one trip,
    # two before); the ingest with the snapshot behind it (one, two before); notice_take;
    # the notice's records; the trim floor; the unlocks with their hand-off flags; the counters.
    assert trips.count <= 7, trips.commands  # 9 before
