"""A session's lanes (bus/services/durable_watch.py ``lanes``) from its parent's lanes index
(bus/store/sessions.py ``lanes_of``), on every backend: the same lanes as reading every
session's ``parent``, in a table of cases, and a lookup whose Redis calls do not grow with
the sessions that are not its lanes."""

# ruff: noqa: F811  (the store fixture, imported from tests.support.store_backends)
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis.connection

from bus.core.models import SessionInfo, now_ms
from bus.services.durable_watch import lanes
from bus.store import sessions
from bus.store.store import Store
from tests.support.store_backends import store  # noqa: F401  (the fixture)


def open_(s: Store, sid: str, parent: str | None = None) -> None:
    s.sessions.put_session(
        SessionInfo(session=sid, handle=f"hosta:{sid}", host="hosta", opened_at=1, parent=parent)
    )


def every_parent(s: Store, sid: str) -> list[str]:
    """The lanes as found by reading every registered session's ``parent``."""
    ids = s.sessions.session_ids()
    started = {x for x, p in zip(ids, s.sessions.session_parents(ids), strict=True) if p == sid}
    return sorted(started | set(s.sessions.gave_to(sid)))


def before_the_index(s: Store) -> None:
    """The bus as a store without lanes indexes left it: none, not indexed."""
    for key in s.r.scan_iter(match=f"{s.k.prefix}:*:lanes"):
        s.r.delete(key)
    s.r.delete(s.k.lanes_indexed)


# Each case: what happens to the store, and coord's lanes after it.
CASES: dict[str, tuple[Callable[[Store], None], list[str]]] = {
    "its lanes, not the others' nor the parentless": (
        lambda s: (open_(s, "l1", "coord"), open_(s, "o1", "elsewhere"), open_(s, "o2")),
        ["l1"],
    ),
    "a lane opened after a first lookup": (
        lambda s: (open_(s, "l1", "coord"), lanes(s, "coord"), open_(s, "l2", "coord")),
        ["l1", "l2"],
    ),
    "a lane opened again keeps its parent": (
        lambda s: (open_(s, "l1", "coord"), open_(s, "l1", "coord")),
        ["l1"],
    ),
    "a lane re-parented is the new parent's": (
        lambda s: (open_(s, "l1", "coord"), open_(s, "l2", "coord"), open_(s, "l1", "other")),
        ["l2"],
    ),
    "a lane re-parented by an update": (
        lambda s: (open_(s, "l1", "other"), s.sessions.update_session("l1", parent="coord")),
        ["l1"],
    ),
    "a lane whose record is gone": (
        lambda s: (
            open_(s, "l1", "coord"),
            open_(s, "l2", "coord"),
            s.r.delete(s.k.s("l1", "session")),
        ),
        ["l2"],
    ),
    "a session given work": (
        lambda s: (open_(s, "l1", "coord"), open_(s, "g1"), s.sessions.add_gave("coord", "g1")),
        ["g1", "l1"],
    ),
    "lanes opened before the index": (
        lambda s: (open_(s, "l1", "coord"), open_(s, "o1", "other"), before_the_index(s)),
        ["l1"],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_lanes_found_are_those_of_every_sessions_parent(
    store: Store, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sessions, "LANE_SETTLE_MS", 0)  # a disagreeing entry is taken out at once
    open_(store, "coord")
    change, expected = CASES[case]
    change(store)
    assert lanes(store, "coord") == every_parent(store, "coord") == expected
    # An entry of a session gone or re-parented was taken out of the set.
    assert sorted(store.r.zrange(store.k.lanes("coord"), 0, -1)) == sorted(
        set(expected) - set(store.sessions.gave_to("coord"))
    )


def test_a_young_entry_ahead_of_its_record_stays_until_its_record_comes(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The index is written before the record: a lookup in between must not lose the lane.
    open_(store, "coord")
    zadd = store.r.zadd
    zadd(store.k.lanes("coord"), {"l1": now_ms()})  # l1 being opened: no record yet
    assert lanes(store, "coord") == []
    with monkeypatch.context() as m:
        m.setattr(store.r, "zadd", lambda *a, **kw: 0)  # the open's index write came first
        open_(store, "l1", "coord")
    assert lanes(store, "coord") == ["l1"]
    # Re-parented a minute ago (its entry that old): taken out.
    open_(store, "l1", "other")
    store.r.zadd(store.k.lanes("coord"), {"l1": now_ms() - sessions.LANE_SETTLE_MS - 1})
    assert lanes(store, "coord") == []
    assert store.r.zcard(store.k.lanes("coord")) == 0


def test_a_session_without_a_parent_has_no_lanes_index(store: Store) -> None:
    for sid in ("a", "b", "c"):
        open_(store, sid)
    lanes(store, "a")
    assert not list(store.r.scan_iter(match=f"{store.k.prefix}:*:lanes"))


def test_a_parent_that_is_no_session_id_is_kept_and_indexes_nothing(store: Store) -> None:
    # A parent may name a handle (host:name); a lanes lookup is by session id, so such a
    # parent has no index, and the open (and the first lookup's backfill) still succeeds.
    open_(store, "lane", parent="hosta:lead")
    store.sessions.update_session("lane", parent="hosta:lead")
    before_the_index(store)
    open_(store, "lead")
    assert lanes(store, "lead") == []
    assert store.sessions.get_session("lane").parent == "hosta:lead"
    assert not list(store.r.scan_iter(match=f"{store.k.prefix}:*:lanes"))


def names(packed: Any) -> list[str]:
    """The command names in a packed buffer (RESP arrays of bulk strings)."""
    parts = b"".join(bytes(c) for c in (packed if isinstance(packed, list) else [packed]))
    lines, out, n = parts.split(b"\r\n"), [], 0
    while n < len(lines):
        if lines[n].startswith(b"*") and n + 2 < len(lines) and lines[n + 1].startswith(b"$"):
            count = int(lines[n][1:])
            out.append(lines[n + 2].decode().upper())
            n += 1 + 2 * count
        else:
            n += 1
    return out


def test_a_lookups_redis_calls_do_not_grow_with_other_sessions(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    open_(store, "coord")
    for n in range(3):
        open_(store, f"lane{n}", "coord")
    sent: list[list[str]] = []
    real = redis.connection.AbstractConnection.send_packed_command

    def counted(conn: Any, command: Any, check_health: bool = True) -> None:
        sent.append(names(command))
        real(conn, command, check_health)

    def one_lookup() -> tuple[int, int]:
        lanes(store, "coord")  # connections made, the bus indexed
        monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counted)
        sent.clear()
        assert lanes(store, "coord") == ["lane0", "lane1", "lane2"]
        monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", real)
        return len(sent), sum(map(len, sent))

    few = one_lookup()
    for n in range(60):  # on every node of a cluster
        open_(store, f"other{n}", "elsewhere" if n % 2 else None)
    assert one_lookup() == few  # round trips, commands
    assert few[1] <= 3 + 3  # the index's, the marker's and gave's reads; a field a lane
