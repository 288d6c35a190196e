"""A session record keeps no ``session`` (its key's), no ``prompt_waiting`` "0", no default
handle and no ``idle`` state (memory): every reader restores them."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from bus.api import Bus
from bus.core.models import SessionInfo


def readers(bus: Bus, sid: str) -> list[Callable[[], SessionInfo | None]]:
    """Every way the store reads a session record whole."""
    store = bus.store

    def begun() -> SessionInfo | None:
        start = store.delivery.begin_delivery(sid, 10)
        assert start is not None
        store.delivery.unlock(sid, start.token)
        return start.info

    def begun_many() -> SessionInfo | None:
        [start] = store.delivery.begin_many([sid], 10)
        assert start is not None
        store.delivery.unlock(sid, start.token)
        return start.info

    def snapshot() -> SessionInfo | None:
        return store.delivery.delivery_snapshot(sid, "no-token").info

    def snapshots() -> SessionInfo | None:
        [snap] = store.delivery.snapshot_many([(sid, "no-token", None)])
        return snap.info

    def snapshots_after() -> SessionInfo | None:
        [snap] = store.delivery.snapshot_many_after(store.pipeline(), [(sid, "no-token", None)])
        return snap.info

    return [
        lambda: store.sessions.get_session(sid),
        lambda: next(s for s in store.sessions.sessions() if s.session == sid),
        lambda: next(i for i, _v in store.schedule.sweep_views([sid])),
        lambda: store.sessions.gave_and_session("other", sid)[1],
        begun,
        begun_many,
        snapshot,
        snapshots,
        snapshots_after,
    ]


@pytest.mark.parametrize("waiting", [False, True])
def test_a_session_record_is_kept_without_its_key_and_usual_prompt_and_read_whole(
    bus: Bus, waiting: bool
) -> None:
    store, key = bus.store, bus.store.k.s("coord", "session")
    bus.open_session("coord")
    bus.turn("coord", "start", prompt_waiting=waiting)
    # Queued, not delivered: a delivery's start reads it, and the record beside it.
    bus.send({"from": "ha:lane", "to_id": "coord", "text": "hi"})
    raw = store.r.hgetall(key)
    assert "session" not in raw and "handle" not in raw
    assert raw.get("prompt_waiting") == ("1" if waiting else None)
    compact = [read() for read in readers(bus, "coord")]
    assert [i and i.session for i in compact] == ["coord"] * len(compact)
    assert {i.handle for i in compact if i} == {f"{raw['host']}:coord"}
    assert {i.prompt_waiting for i in compact if i} == {waiting}


def test_a_prompt_no_longer_waiting_goes_from_the_record(bus: Bus) -> None:
    store, key = bus.store, bus.store.k.s("coord", "session")
    bus.open_session("coord")
    bus.turn("coord", "start", prompt_waiting=True)
    assert store.r.hget(key, "prompt_waiting") == "1"
    bus.turn("coord", "end")
    assert store.r.hget(key, "prompt_waiting") is None
    assert store.r.hget(key, "state") is None  # idle: left out
    info = store.sessions.get_session("coord")
    assert info is not None and info.prompt_waiting is False and info.state == "idle"


def test_opening_a_session_on_this_host_makes_its_empty_queue_file(bus: Bus) -> None:
    # Its first notice then appends to a file that exists (bus.delivery.floor.Floor.prepare).
    bus.open_session("here", host=bus.settings.host)
    queue = bus.floor.session_dir("here") / "messages.jsonl"
    assert queue.exists() and queue.stat().st_size == 0
    bus.open_session("there", host="elsewhere")  # another host's floor is not here
    assert not bus.floor.session_dir("there").exists()
