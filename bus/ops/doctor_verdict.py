"""``inbox doctor``'s verdict: its problems merged into one refusal (code, words, hint).

Pure: :func:`verdict` reads the report :func:`bus.ops.doctor.run_doctor` made and says what
the one refusal line leads with. The store refusing writes comes first (nothing works
until it is fixed), then a durability it cannot meet, then a server too old; the code is
the most pressing problem's; an unreachable gateway or MCP server is said with its fix;
bus-wide checks are counted by name at the end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bus.telemetry.problems import CHECKS

# Problems of the whole bus, named in one clause.
BUS_WIDE = CHECKS
# The surfaces run beside the bus (bus.ops.doctor_reach): each said with its fix.
SURFACES = ("gateway", "mcp")
FIXES_IN_JSON = "each problem's fix is in the JSON on stdout"
# The server states a line on stderr is worth (``ok`` and ``too_old`` are said elsewhere).
QUIET_SERVER = (None, "ok", "too_old")


@dataclass(frozen=True)
class Verdict:
    """The refusal ``inbox doctor`` exits 1 with: ``code``, ``message``, ``hint``."""

    code: str
    message: str
    hint: str | None


def server_note(server: dict[str, Any] | None) -> str | None:
    """What to say of the store's server beside the report (``None``: nothing), for a
    server that is not ``ok`` yet no problem of its own (unknown, unfixed, unreachable)."""
    server = server or {}
    if server.get("state") in QUIET_SERVER:
        return None
    return f"the store's server: {server.get('message')}"


def _sessions(rows: list[dict[str, Any]], check: str) -> set[str]:
    return {str(p["session"]) for p in rows if p.get("check") == check}


def _first(rows: list[dict[str, Any]], check: str) -> dict[str, Any] | None:
    return next((p for p in rows if p.get("check") == check), None)


def verdict(problems: list[dict[str, Any]], server: dict[str, Any] | None) -> Verdict | None:
    """The refusal for ``problems`` (``None`` when there are none): one clause per kind of
    problem, the most pressing first, and the code of the most pressing one."""
    if not problems:
        return None
    server = server or {}
    unreachable = _sessions(problems, "socket")
    torn = _sessions(problems, "malformed")
    unwoken = _sessions(problems, "wake_consent")
    storage = _first(problems, "storage")
    durable = _first(problems, "durability")
    too_old = server.get("state") == "too_old"
    said: list[str] = []
    if storage:  # the store refuses writes: said first, with its fix
        said.append(f"{storage['reason']}; fix: {storage['fix']}")
    if durable:  # INBOX_DURABILITY this store cannot meet: every send refused
        said.append(f"{durable['reason']}: {durable['effect']}")
    if too_old:
        said.append(str(server["message"]))
    if unreachable:
        said.append(
            f"{len(unreachable)} session(s) cannot be woken while idle nor hear a message mid-turn"
        )
    if torn:
        said.append(f"{len(torn)} session(s) have unreadable floor lines kept aside")
    if unwoken:
        said.append(
            f"{len(unwoken)} session(s) are not woken by their wake command until it is"
            " kept on this host"
        )
    said += [f"{p['reason']}; fix: {p['fix']}" for p in problems if p.get("check") in SURFACES]
    bus_wide = [name for name in BUS_WIDE if _first(problems, name)]
    if bus_wide:
        said.append(f"{len(problems)} problem(s) in the bus: " + ", ".join(sorted(bus_wide)))
    said = said or [f"{len(problems)} problem(s)"]
    return Verdict(
        code=_code(
            storage=bool(storage),
            durable=bool(durable),
            too_old=too_old,
            unreachable=bool(unreachable),
            torn=bool(torn),
            unwoken=bool(unwoken),
        ),
        message="; ".join(said),
        hint=None if unreachable or too_old else FIXES_IN_JSON,
    )


def _code(
    *, storage: bool, durable: bool, too_old: bool, unreachable: bool, torn: bool, unwoken: bool
) -> str:
    """The most pressing problem's code (a server too old yields to a store that refuses
    writes or a durability it cannot meet, and comes before the rest)."""
    for found, code in (
        (storage, "store_refused"),
        (durable, "not_durable"),
        (too_old, "server_too_old"),
        (unreachable, "unreachable"),
        (torn, "malformed_lines"),
        (unwoken, "wake_consent"),
    ):
        if found:
            return code
    return "problems"


__all__ = ["BUS_WIDE", "FIXES_IN_JSON", "SURFACES", "Verdict", "server_note", "verdict"]
