"""Which hosts ``inbox host forget`` refuses, and in which words (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from bus.core.errors import BadInput
from bus.telemetry.host_retire import NAMED, check_host_name, forget_refusal


def worker(state: str) -> dict[str, Any]:
    return {"name": "h", "role": "worker", "state": state}


def scheduler(state: str) -> dict[str, Any]:
    return {"name": "scheduler.h", "role": "scheduler", "host": "h", "state": state}


MANY = [f"s{i:02d}" for i in range(NAMED + 2)]


@pytest.mark.parametrize(
    ("rows", "open_sids", "code", "words"),
    [
        ([], [], "not_found", "no host 'h' is known"),
        ([worker("up")], [], "host_not_down", "host h is up (its worker beats)"),
        ([worker("starting")], [], "host_not_down", "host h is starting"),
        ([worker("down"), scheduler("up")], [], "host_not_down", "its scheduler beats"),
        ([worker("up")], ["a"], "host_not_down", "stop its `inbox up` (INBOX_HOST=h)"),
        ([worker("down")], ["a", "b"], "host_has_sessions", "2 open session(s) (a, b)"),
        ([worker("down")], MANY, "host_has_sessions", f"({', '.join(MANY[:NAMED])}, ...)"),
        ([worker("down")], [], None, ""),
        ([worker("down"), scheduler("down")], [], None, ""),
        ([scheduler("down")], [], None, ""),
    ],
)
def test_only_a_down_host_without_open_sessions_may_be_forgotten(
    rows: list[dict[str, Any]], open_sids: list[str], code: str | None, words: str
) -> None:
    refusal = forget_refusal("h", rows, open_sids)
    if code is None:
        assert refusal is None
        return
    assert refusal is not None
    assert refusal.code == code and words in str(refusal)
    assert refusal.to_json()["host"] == "h"


@pytest.mark.parametrize("name", ["scheduler", "scheduler.h", "bad name", "", "a/b"])
def test_a_name_that_is_no_host_is_bad_input(name: str) -> None:
    with pytest.raises(BadInput):
        check_host_name(name)
