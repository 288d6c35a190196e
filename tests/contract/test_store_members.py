"""The store's members aggregate: workspace members, their folded handles, token
generations and revoked token ids (bus/store/members.py), held to its contract on every
backend (tests/support/store_backends.py)."""

# ruff: noqa: F811  (the store fixture, imported from tests.support.store_backends)
from __future__ import annotations

from bus.store.store import Store
from tests.support.store_backends import store  # noqa: F401  (the fixture)


def test_a_workspace_with_no_members_reads_empty(store: Store) -> None:
    assert store.members.members("ws") == {}
    assert store.members.member_status("ws", "ann") is None
    assert store.members.member_generation("ws", "ann") == 0
    assert store.members.member_by_fold("ann") is None
    assert store.members.is_revoked("jti-1") is False


def test_a_member_s_status_is_kept_per_workspace(store: Store) -> None:
    store.members.set_member("ws", "ann", "active")
    store.members.set_member("ws", "bob", "active")
    store.members.set_member("other", "ann", "removed")
    store.members.set_member("ws", "bob", "removed")  # a later status replaces the earlier
    assert store.members.members("ws") == {"ann": "active", "bob": "removed"}
    assert store.members.member_status("ws", "bob") == "removed"
    assert store.members.member_status("other", "ann") == "removed"
    assert store.members.member_status("other", "bob") is None


def test_a_folded_handle_names_its_member_and_a_later_one_replaces_it(store: Store) -> None:
    store.members.index_member_fold("ann", "ws", "Ann")
    assert store.members.member_by_fold("ann") == "ws/Ann"
    store.members.index_member_fold("ann", "other", "ANN")
    assert store.members.member_by_fold("ann") == "other/ANN"


def test_each_bump_moves_a_member_s_generation_on_by_one(store: Store) -> None:
    assert store.members.bump_member_generation("ws", "ann") == 1
    assert store.members.bump_member_generation("ws", "ann") == 2
    assert store.members.member_generation("ws", "ann") == 2
    assert store.members.member_generation("other", "ann") == 0


def test_a_revoked_token_id_stays_revoked_and_others_do_not(store: Store) -> None:
    store.members.revoke("jti-1")
    store.members.revoke("jti-1")  # twice: still revoked, nothing else changes
    assert store.members.is_revoked("jti-1") is True
    assert store.members.is_revoked("jti-2") is False
