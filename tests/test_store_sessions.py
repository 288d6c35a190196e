"""The store's sessions: records and their registry (bus/store/sessions.py), held to its
contract on every backend (a standalone Redis and a Redis Cluster: tests/store_backends.py)."""

# ruff: noqa: F811  (the store fixture, imported from tests.store_backends)
from __future__ import annotations

from bus.store.store import Store
from tests.store_backends import SIDS, info, store  # noqa: F401  (the fixture)


def test_sessions_put_update_and_list_across_slots(store: Store) -> None:
    for n, sid in enumerate(SIDS):
        store.put_session(info(sid, handle="h:even" if n % 2 == 0 else "h:odd", opened_at=n + 1))
    assert store.session_ids() == SIDS
    assert [s.session for s in store.sessions()] == SIDS
    assert [s.session for s in store.sessions_by_handle("h:even")] == sorted(SIDS[::2])
    store.update_session("s3", state="running", wake_cmd=None, prompt_waiting=True)
    got = store.get_session("s3")
    assert got is not None and got.state == "running" and got.prompt_waiting
    assert got.updated_at > 0
    assert store.incr_turns("s3") == 1 and store.incr_turns("s3") == 2
    # Put replaces the record: a field left out of the new one is gone.
    store.put_session(info("s3", handle="h:moved"))
    again = store.get_session("s3")
    assert again is not None and again.turns == 0 and again.state == "idle"
    # The old handle's index still lists s3, but the record no longer carries it.
    assert "s3" not in [s.session for s in store.sessions_by_handle("h:odd")]


def test_the_delegator_is_recorded_once(store: Store) -> None:
    store.put_session(info("s1"))
    assert store.set_delegator_once("s1", "boss")
    assert not store.set_delegator_once("s1", "other")
    got = store.get_session("s1")
    assert got is not None and got.delegator == "boss"


def test_presence_touches_only_an_existing_session(store: Store) -> None:
    store.touch_seen("ghost", 5)
    assert store.get_session("ghost") is None
    store.put_session(info("s1"))
    store.touch_seen("s1", 1234)
    assert store.last_seen("s1") == 1234
