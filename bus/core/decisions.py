"""Typed request threads (Immersive Commons' ``ic_agent_inbox_reply``).

A ``meeting_request`` or ``task`` thread opens in ``REQUESTED``; the two parties move it
with decisions. Every legal move is one row of :data:`RULES`; anything not in the table
is ``invalid_for_state``, whose message names what the actor may do instead (:func:`why_refused`).
Pure: the caller supplies the actor's role, never a body field.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .errors import BadInput

REQUESTED = "REQUESTED"
OFFERED = "OFFERED"
CONFIRMED = "CONFIRMED"
DECLINED = "DECLINED"
DROPPED = "DROPPED"
STATES = (REQUESTED, OFFERED, CONFIRMED, DECLINED, DROPPED)
TERMINAL = frozenset({CONFIRMED, DECLINED, DROPPED})

DECISIONS = ("accept", "decline", "counter", "clarify", "withdraw")
# Actor roles: the request's original sender, its recipient, or not a party at all.
SENDER, RECIPIENT, OTHER = "sender", "recipient", "other"
ROLES = (SENDER, RECIPIENT, OTHER)
PARTIES = (SENDER, RECIPIENT)

# Who the actor is relative to the current state. In REQUESTED it is the request's side;
# in OFFERED it is whether the actor made the standing offer (a party never answers its
# own offer).
OFFERER, COUNTERPARTY = "offerer", "counterparty"

THREAD_TYPES = ("meeting_request", "task")
MAX_DECISION_MESSAGE = 2000
MAX_WINDOWS = 10
MAX_TZ_HINT = 64

RULES: dict[tuple[str, str, str], str] = {
    # (state, decision, relation) -> new state
    (REQUESTED, "accept", RECIPIENT): CONFIRMED,
    (REQUESTED, "decline", RECIPIENT): DECLINED,
    (REQUESTED, "counter", RECIPIENT): OFFERED,
    (REQUESTED, "clarify", RECIPIENT): REQUESTED,
    (REQUESTED, "clarify", SENDER): REQUESTED,
    (REQUESTED, "withdraw", SENDER): DROPPED,
    (OFFERED, "accept", COUNTERPARTY): CONFIRMED,
    (OFFERED, "decline", COUNTERPARTY): DECLINED,
    (OFFERED, "counter", COUNTERPARTY): OFFERED,
    (OFFERED, "clarify", COUNTERPARTY): OFFERED,
    (OFFERED, "clarify", OFFERER): OFFERED,
}


@dataclass(frozen=True)
class Result:
    """The outcome of one decision; ``offered_by`` is who holds the standing offer after
    it (only in ``OFFERED``)."""

    ok: bool
    new_state: str | None
    error: str | None
    offered_by: str | None = None


def transition(state: str, decision: str, actor: str, offered_by: str | None) -> Result:
    """Apply ``decision`` by ``actor`` (a role) to a thread in ``state``.

    Errors, in this order: ``not_a_party``, ``thread_terminal``, ``invalid_for_state``.
    Raises BadInput for an unknown decision, ValueError for an unknown state or role or an
    OFFERED thread without its offerer (bugs in the caller, not refusals).
    """
    if decision not in DECISIONS:
        raise BadInput(f"unknown decision {decision!r}: one of {', '.join(DECISIONS)}")
    if state not in STATES:
        raise ValueError(f"unknown thread state {state!r}")
    if actor not in ROLES:
        raise ValueError(f"unknown actor role {actor!r}")
    if state == OFFERED and offered_by not in PARTIES:
        raise ValueError(f"an OFFERED thread needs offered_by sender|recipient, not {offered_by!r}")
    if actor == OTHER:
        return Result(False, None, "not_a_party")
    if state in TERMINAL:
        return Result(False, None, "thread_terminal")
    relation = actor
    if state == OFFERED:
        relation = OFFERER if actor == offered_by else COUNTERPARTY
    new_state = RULES.get((state, decision, relation))
    if new_state is None:
        return Result(False, None, "invalid_for_state")
    holder = None
    if new_state == OFFERED:
        holder = actor if decision == "counter" else offered_by
    return Result(True, new_state, None, holder)


def allowed(state: str, actor: str, offered_by: str | None) -> tuple[str, ...]:
    """The decisions ``actor`` (a role) may make on a thread in ``state``, in
    :data:`DECISIONS`' order; none on a final state or for a non-party."""
    relation = actor
    if state == OFFERED:
        relation = OFFERER if actor == offered_by else COUNTERPARTY
    return tuple(d for d in DECISIONS if (state, d, relation) in RULES)


def why_refused(error: str, state: str, actor: str, offered_by: str | None) -> str:
    """What a refused decision's message says after its code: the thread's state, and
    what the actor may do instead (or that it may do nothing)."""
    if error == "not_a_party":
        return "only the request's sender and recipient decide on it"
    if error == "thread_terminal":
        return f"it is {state}, which is final: no decision moves it"
    may = allowed(state, actor, offered_by)
    if state == OFFERED and actor == offered_by:
        where = f"it is {OFFERED} with your offer standing, for the other party to answer"
    elif state == REQUESTED and actor == SENDER:
        where = f"it is {REQUESTED}, waiting on its recipient"
    else:
        where = f"it is {state}"
    return f"{where}; you may: {', '.join(may)}" if may else f"{where}; nothing is yours to do"


def check_message(message: str | None) -> str | None:
    """The decision's note, refused (not truncated) past MAX_DECISION_MESSAGE."""
    if message is not None and len(message) > MAX_DECISION_MESSAGE:
        raise BadInput(
            f"message is longer than {MAX_DECISION_MESSAGE} characters (refused, not truncated)"
        )
    return message


def _instant(value: Any, what: str) -> datetime:
    if not isinstance(value, str) or not value.strip():
        raise BadInput(f"{what} must be a non-empty ISO-8601 string")
    try:
        return datetime.fromisoformat(value.strip())
    except ValueError:
        raise BadInput(f"{what} {value!r} is not an ISO-8601 date-time") from None


def _check_window(window: Any, n: int) -> dict[str, str]:
    where = f"window {n}"
    if not isinstance(window, dict):
        raise BadInput(f"{where} must be an object {{start, end, tz_hint?}}")
    unknown = set(window) - {"start", "end", "tz_hint"}
    if unknown:
        raise BadInput(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    start = _instant(window.get("start"), f"{where} start")
    end = _instant(window.get("end"), f"{where} end")
    if (start.tzinfo is None) != (end.tzinfo is None):
        # Comparing aware with naive is meaningless (and a TypeError).
        raise BadInput(f"{where}: start and end must both carry a UTC offset or neither")
    if not start < end:
        raise BadInput(f"{where}: start must be before end")
    out = {"start": str(window["start"]).strip(), "end": str(window["end"]).strip()}
    tz = window.get("tz_hint")
    if tz is not None:
        if not isinstance(tz, str) or not tz.strip() or len(tz) > MAX_TZ_HINT:
            raise BadInput(f"{where}: tz_hint must be a short non-empty string")
        out["tz_hint"] = tz.strip()
    return out


def validate_windows(
    decision: str, thread_type: str, windows: list[dict[str, Any]] | None
) -> list[dict[str, str]]:
    """Check proposed windows; a meeting_request counter needs 1–10, elsewhere they are
    optional but still checked. Returns them normalised; raises BadInput."""
    if thread_type not in THREAD_TYPES:
        raise BadInput(f"unknown thread type {thread_type!r}: one of {', '.join(THREAD_TYPES)}")
    windows = list(windows or [])
    if decision == "counter" and thread_type == "meeting_request" and not windows:
        raise BadInput("a meeting_request counter must propose 1-10 windows (--window START/END)")
    if len(windows) > MAX_WINDOWS:
        raise BadInput(f"at most {MAX_WINDOWS} windows, got {len(windows)}")
    return [_check_window(w, i) for i, w in enumerate(windows, 1)]


def parse_window(s: str) -> dict[str, str]:
    """The CLI form ``START/END[/TZ]``; TZ may itself contain '/' (``Europe/Berlin``)."""
    parts = s.split("/", 2)
    if len(parts) < 2 or not parts[0].strip() or not parts[1].strip():
        raise BadInput(f"window {s!r}: expected START/END[/TZ]")
    window = {"start": parts[0].strip(), "end": parts[1].strip()}
    if len(parts) == 3:
        window["tz_hint"] = parts[2]
    return _check_window(window, 1)
