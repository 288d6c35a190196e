"""Refusals that say what to do next: a decision refused for its thread's state, a write
without a token, a drain on a host that is not the session's."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from bus.api import Bus
from bus.core.decisions import allowed, why_refused
from bus.core.settings import Settings
from bus.surfaces.cli.floor_here import not_here
from bus.trust.tokens import missing_token
from tests.support.cli import inbox_as


@pytest.mark.parametrize(
    ("error", "state", "actor", "offered_by", "says"),
    [
        ("invalid_for_state", "OFFERED", "recipient", "recipient",
         "it is OFFERED with your offer standing, for the other party to answer; you may: clarify"),
        ("invalid_for_state", "REQUESTED", "sender", None,
         "it is REQUESTED, waiting on its recipient; you may: clarify, withdraw"),
        ("invalid_for_state", "OFFERED", "sender", "recipient",
         "it is OFFERED; you may: accept, decline, counter, clarify"),
        ("thread_terminal", "CONFIRMED", "sender", None,
         "it is CONFIRMED, which is final: no decision moves it"),
        ("not_a_party", "REQUESTED", "other", None,
         "only the request's sender and recipient decide on it"),
    ],
)  # fmt: skip
def test_a_refused_decision_says_the_state_and_what_is_left(
    error: str, state: str, actor: str, offered_by: str | None, says: str
) -> None:
    assert why_refused(error, state, actor, offered_by) == says


def test_what_is_allowed_follows_the_rules() -> None:
    assert allowed("REQUESTED", "recipient", None) == ("accept", "decline", "counter", "clarify")
    assert allowed("OFFERED", "sender", "sender") == ("clarify",)
    assert allowed("DROPPED", "sender", None) == ()
    assert allowed("REQUESTED", "other", None) == ()


def test_a_missing_token_names_the_command_and_the_variable() -> None:
    said = missing_token("agent:inbox:write", "alice")
    assert "`inbox token issue --session alice --scopes agent:inbox:write`" in said
    assert "INBOX_TOKEN" in said and "this write" in said
    assert "this read" in missing_token("agent:inbox:read")


@pytest.mark.parametrize(
    ("recorded", "message", "hint"),
    [
        (None, "no session 'w1' has an inbox here (/h)", "open it with: inbox session open w1"),
        ("hostb", "session 'w1' lives on host 'hostb', not on this one ('hosta')",
         "drain it there (INBOX_HOST=hostb); `inbox session open w1` here would move it"),
        ("hosta", "session 'w1' is on this host ('hosta') but has no inbox under /h",
         "run this with the INBOX_HOME its harness uses"),
    ],
)  # fmt: skip
def test_a_session_not_here_says_where_it_is(recorded: str | None, message: str, hint: str) -> None:
    said, next_step = not_here("w1", "hosta", "/h", recorded)
    assert said == message and next_step.startswith(hint)


def test_drain_on_another_host_names_the_session_s_host_and_moves_nothing(
    settings: Settings, make_bus: Callable[..., Bus], tmp_path: Path
) -> None:
    make_bus(host="hostb", home=tmp_path / "b").open_session("remote")
    here = replace(settings, host="hosta", home=tmp_path / "a")
    done = inbox_as(here, "drain", "remote")
    assert done.returncode == 1
    assert json.loads(done.stdout)["error"] == "not_found"
    assert "lives on host 'hostb'" in done.stderr and "INBOX_HOST=hostb" in done.stderr
    assert "open it with" not in done.stderr
    assert make_bus().session("remote").host == "hostb"  # still b's


def test_a_write_without_a_token_says_how_to_get_one(settings: Settings, bus: Bus) -> None:
    bus.open_session("bob")
    done = inbox_as(settings, "send", "--to-id", "bob", "--text", "hi", INBOX_SECRET="s" * 64)
    assert done.returncode == 1, done.stdout
    assert json.loads(done.stdout)["error"] == "token_missing"
    assert "inbox token issue" in done.stderr and "INBOX_TOKEN" in done.stderr
