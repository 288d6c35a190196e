"""The store's sessions aggregate: records and their registry, who gave whom work
(bus/store/sessions.py), held to its
contract on every backend (a standalone Redis and a Redis Cluster: tests/support/store_backends.py)."""

# ruff: noqa: F811  (the store fixture, imported from tests.support.store_backends)
from __future__ import annotations

from bus.core.models import SessionInfo
from bus.store.store import Store
from tests.support.store_backends import SIDS, info, store  # noqa: F401  (the fixture)


def test_sessions_put_update_and_list_across_slots(store: Store) -> None:
    for n, sid in enumerate(SIDS):
        store.sessions.put_session(
            info(sid, handle="h:even" if n % 2 == 0 else "h:odd", opened_at=n + 1)
        )
    assert store.sessions.session_ids() == SIDS
    assert [s.session for s in store.sessions.sessions()] == SIDS
    assert [s.session for s in store.sessions.sessions_by_handle("h:even")] == sorted(SIDS[::2])
    store.sessions.update_session("s3", state="running", wake_cmd=None, prompt_waiting=True)
    got = store.sessions.get_session("s3")
    assert got is not None and got.state == "running" and got.prompt_waiting
    assert got.updated_at > 0
    assert store.sessions.incr_turns("s3") == 1 and store.sessions.incr_turns("s3") == 2
    # Put replaces the record: a field left out of the new one is gone.
    store.sessions.put_session(info("s3", handle="h:moved"))
    again = store.sessions.get_session("s3")
    assert again is not None and again.turns == 0 and again.state == "idle"
    # The old handle's index still lists s3, but the record no longer carries it.
    assert "s3" not in [s.session for s in store.sessions.sessions_by_handle("h:odd")]


def test_the_delegator_is_recorded_once(store: Store) -> None:
    store.sessions.put_session(info("s1"))
    assert store.sessions.set_delegator_once("s1", "boss")
    assert not store.sessions.set_delegator_once("s1", "other")
    got = store.sessions.get_session("s1")
    assert got is not None and got.delegator == "boss"


def test_presence_touches_only_an_existing_session(store: Store) -> None:
    store.sessions.touch_seen("ghost", 5)
    assert store.sessions.get_session("ghost") is None
    store.sessions.put_session(info("s1"))
    store.sessions.touch_seen("s1", 1234)
    assert store.sessions.last_seen("s1") == 1234


def test_a_record_leaves_out_a_default_handle_and_the_idle_state(store: Store) -> None:
    key = store.k.s("s1", "session")
    store.sessions.put_session(info("s1", handle="hosta:s1"))
    raw = store.r.hgetall(key)
    assert "handle" not in raw and "state" not in raw and raw["host"] == "hosta"
    got = store.sessions.get_session("s1")
    assert got is not None and (got.handle, got.state) == ("hosta:s1", "idle")
    assert [s.session for s in store.sessions.sessions_by_handle("hosta:s1")] == ["s1"]
    # Another handle, and any state but idle, are kept; back to idle, the state goes.
    store.sessions.put_session(info("s2", handle="h:named"))
    assert store.r.hget(store.k.s("s2", "session"), "handle") == "h:named"
    store.sessions.update_session("s1", state="running")
    assert store.r.hget(key, "state") == "running"
    store.sessions.update_session("s1", state="idle")
    assert store.r.hget(key, "state") is None
    # A new host moves the default with it; the old default stays the record's handle.
    store.sessions.update_session("s1", host="hostb")
    moved = store.sessions.get_session("s1")
    assert moved is not None and (moved.host, moved.handle) == ("hostb", "hosta:s1")
    store.sessions.update_session("s1", handle="hostb:s1")
    assert "handle" not in store.r.hgetall(key)
    # A record that keeps both reads the same.
    store.sessions.put_session(info("s3", handle="hosta:s3"))
    compact = store.sessions.get_session("s3")
    store.r.hset(store.k.s("s3", "session"), mapping={"handle": "hosta:s3", "state": "idle"})
    assert store.sessions.get_session("s3") == compact


def test_a_receipt_reads_a_record_without_a_state_as_idle(store: Store) -> None:
    store.sessions.put_session(info("s1", handle="hosta:s1"))
    [[_h, _rec, _ans, (state, _seen, opened, host)]] = store.receipts.receipt_rows([("s1", "m-1")])
    assert state == "idle" and opened is not None and host == "hosta"
    [[_h, _rec, _ans, (none, *_)]] = store.receipts.receipt_rows([("ghost", "m-1")])
    assert none is None


def test_who_gave_whom_work_is_read_with_the_records(store: Store) -> None:
    store.sessions.put_session(info("s1"))
    store.sessions.put_session(SessionInfo(session="s2", handle="h:b", host="hosta", parent="s9"))
    assert store.sessions.gave_to("s1") == [] and not store.sessions.gave("s1", "s2")
    store.sessions.add_gave("s1", "s2")
    store.sessions.add_gave("s1", "s3")
    assert store.sessions.gave("s1", "s2") and not store.sessions.gave("s2", "s1")
    assert store.sessions.gave_to("s1") == ["s2", "s3"]
    gave, record = store.sessions.gave_and_session("s1", "s2")
    assert gave and record is not None and record.session == "s2"
    assert store.sessions.gave_and_session("s1", "nobody") == (False, None)
    record, gave, parent = store.sessions.session_and_gave("s1", "s2")
    assert record is not None and record.session == "s1" and gave and parent == "s9"
    assert store.sessions.session_parents(["s2", "s1", "nobody"]) == ["s9", None, None]


def test_a_refused_notice_s_retry_time_is_dropped(store: Store) -> None:
    store.sessions.put_session(info("s1"))
    store.r.hset(store.k.s("s1", "session"), "retry_at", "5000")
    store.sessions.clear_retry("s1")
    assert store.r.hget(store.k.s("s1", "session"), "retry_at") is None
    store.sessions.clear_retry("nobody")  # nothing to drop: nothing made
    assert store.sessions.get_session("nobody") is None


def test_sessions_listed_under_a_skeleton_are_those_still_recorded(store: Store) -> None:
    assert store.sessions.sessions_by_skeleton("skel") == []
    for sid in ("s2", "s1", "s3"):
        store.sessions.put_session(info(sid))
        store.sessions.index_skeleton("skel", sid)
    store.r.delete(store.k.s("s3", "session"))  # a listed session whose record went
    assert [s.session for s in store.sessions.sessions_by_skeleton("skel")] == ["s1", "s2"]
