"""``inbox doctor``'s pure rules: the verdict its problems merge into, and the storage row
a write-refusing reply becomes (from the fault the refusal carries, not its wording)."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from bus.core.store_faults import fault_of
from bus.ops.doctor_verdict import FIXES_IN_JSON, server_note, verdict
from bus.store.redis_errors import refused
from bus.telemetry.storage import EFFECT, storage_row


def row(check: str, **more: Any) -> dict[str, Any]:
    return {"check": check, "reason": f"{check} reason", "fix": f"{check} fix", **more}


SOCKET = row("socket", session="a")
SOCKET_B = row("socket", session="b")
TORN = row("malformed", session="a")
CONSENT = row("wake_consent", session="c")
STORAGE = row("storage", effect="writes refused")
DURABLE = row("durability", effect="sends refused")
HOST = row("host", host="h")
WAITING = row("waiting", session="a")
STORE = row("store")
GATEWAY = row("gateway")
MCP = row("mcp")
TOO_OLD = {"state": "too_old", "message": "the server is too old"}


@pytest.mark.parametrize(
    ("problems", "server", "code", "message", "hint"),
    [
        ([SOCKET, SOCKET_B], None, "unreachable",
         "2 session(s) cannot be woken while idle nor hear a message mid-turn", None),
        ([TORN], None, "malformed_lines",
         "1 session(s) have unreadable floor lines kept aside", FIXES_IN_JSON),
        ([CONSENT], None, "wake_consent",
         "1 session(s) are not woken by their wake command until it is kept on this host",
         FIXES_IN_JSON),
        ([TORN, SOCKET], None, "unreachable",
         "1 session(s) cannot be woken while idle nor hear a message mid-turn; "
         "1 session(s) have unreadable floor lines kept aside", None),
        ([SOCKET, STORAGE], None, "store_refused",
         "storage reason; fix: storage fix; "
         "1 session(s) cannot be woken while idle nor hear a message mid-turn", None),
        ([DURABLE, STORAGE], TOO_OLD, "store_refused",
         "storage reason; fix: storage fix; durability reason: sends refused; "
         "the server is too old", None),
        ([DURABLE], None, "not_durable", "durability reason: sends refused", FIXES_IN_JSON),
        ([DURABLE], TOO_OLD, "not_durable",
         "durability reason: sends refused; the server is too old", None),
        ([row("server")], TOO_OLD, "server_too_old", "the server is too old", None),
        ([HOST, WAITING], None, "problems", "2 problem(s) in the bus: host, waiting",
         FIXES_IN_JSON),
        ([GATEWAY, MCP, SOCKET], None, "unreachable",
         "1 session(s) cannot be woken while idle nor hear a message mid-turn; "
         "gateway reason; fix: gateway fix; mcp reason; fix: mcp fix", None),
        ([MCP, HOST], None, "problems",
         "mcp reason; fix: mcp fix; 2 problem(s) in the bus: host", FIXES_IN_JSON),
        ([STORE], None, "problems", "1 problem(s)", FIXES_IN_JSON),
    ],
)  # fmt: skip
def test_the_verdict_leads_with_the_most_pressing_problem(
    problems: list[dict[str, Any]],
    server: dict[str, Any] | None,
    code: str,
    message: str,
    hint: str | None,
) -> None:
    said = verdict(problems, server)
    assert said is not None
    assert (said.code, said.message, said.hint) == (code, message, hint)


def test_no_problems_no_verdict() -> None:
    assert verdict([], {"state": "too_old", "message": "old"}) is None


@pytest.mark.parametrize(
    ("server", "note"),
    [
        (None, None),
        ({"state": "ok", "message": "fine"}, None),
        ({"state": "too_old", "message": "old"}, None),
        ({"state": "unfixed", "message": "lacks fixes"}, "the store's server: lacks fixes"),
        ({"state": "unreachable", "message": "no answer"}, "the store's server: no answer"),
    ],
)
def test_the_server_note(server: dict[str, Any] | None, note: str | None) -> None:
    assert server_note(server) == note


@pytest.mark.parametrize(
    "reply",
    [
        "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist",
        "READONLY You can't write against a read only replica.",
        "OOM command not allowed when used memory > 'maxmemory'.",
        "NOREPLICAS Not enough good replicas to write.",
    ],
)
def test_a_refusal_carries_its_fault_and_the_doctor_row_is_built_from_it(reply: str) -> None:
    said = refused(redis.ResponseError(reply))
    assert said is not None
    fault = fault_of(reply)
    assert fault is not None
    assert said.fault is fault
    assert storage_row(said.fault) == {
        "check": "storage",
        "effect": EFFECT,
        "reason": fault.words,
        "fix": fault.fix,
        "store_reason": fault.reason,
    }
