"""A session record as the ``P:{sid}:session`` hash keeps it, and back.

A session's record lives as long as the session, idle or not, so it leaves out what
reads back the same: ``session`` (its key's), ``prompt_waiting`` "0"
(:func:`session_fields`), ``state`` ``idle`` and a default ``handle``
(``<host>:<sid>``). :func:`as_read` puts the handle back; ``session_row`` reads a
missing state as ``idle``. A record that keeps them reads the same.
Standard library only (the read lane, bus.lanes.lite_store, reads records through it).
"""

from __future__ import annotations

# Not ``typing.TYPE_CHECKING``: importing typing alone costs the read lane several ms.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from bus.core.models import SessionInfo

# Left out at this value (``handle``: at its default, which depends on the host).
IDLE = "idle"


# Session record fields not stored at their value: ``session`` is
# its key's, ``prompt_waiting`` absent is "0". :func:`session_from_hash` puts them back.
_SESSION_UNSTORED = {"prompt_waiting": "0"}


def session_fields(fields: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """``fields`` for the session record: what to set, and what to delete (the fields at
    their unstored value; ``session``, always its key's, never set)."""
    out = {f: v for f, v in fields.items() if f != "session"}
    drop = [f for f, v in _SESSION_UNSTORED.items() if out.get(f) == v]
    for f in drop:
        del out[f]
    return out, drop


# SessionInfo's fields in their order (bus.core.models; a test holds them equal).
SESSION_FIELDS = (
    "session", "handle", "host", "state", "parent", "delegator", "turns", "wake_cmd",
    "wake_pending", "woken_at", "wake_problem", "wake_error", "prompt_waiting", "agent_inbox",
    "workspace", "starter", "opened_at", "updated_at", "last_seen", "fault", "fault_at", "faults",
)  # fmt: skip


def session_row(data: dict[str, str], sid: str) -> dict[str, Any]:
    """A session record read whole, as :class:`~bus.core.models.SessionInfo`'s fields in
    their order: ``session`` is ``sid`` (its key's), ``prompt_waiting`` absent is false
    (:func:`session_fields` stores neither). Standard library only
    (the read commands' fast lane, bus.lanes.read, uses it as it is)."""

    def opt(name: str) -> str | None:
        v = data.get(name)
        return v if v else None

    agent_inbox = data.get("agent_inbox")
    return {
        "session": sid,
        "handle": data["handle"],
        "host": data["host"],
        "state": data.get("state", "idle"),
        "parent": opt("parent"),
        "delegator": opt("delegator"),
        "turns": int(data.get("turns", "0") or 0),
        "wake_cmd": opt("wake_cmd"),
        "wake_pending": opt("wake_pending"),
        "woken_at": int(data["woken_at"]) if data.get("woken_at") else None,
        "wake_problem": opt("wake_problem"),
        "wake_error": opt("wake_error"),
        "prompt_waiting": data.get("prompt_waiting") == "1",
        "agent_inbox": None if not agent_inbox else agent_inbox == "1",
        "workspace": opt("workspace"),
        "starter": opt("starter"),
        "opened_at": int(data.get("opened_at", "0") or 0),
        "updated_at": int(data.get("updated_at", "0") or 0),
        "last_seen": int(data.get("last_seen", "0") or 0),
        "fault": opt("fault"),
        "fault_at": int(data["fault_at"]) if data.get("fault_at") else None,
        "faults": int(data["faults"]) if data.get("faults") else None,
    }


def session_from_hash(data: dict[str, str], sid: str) -> SessionInfo:
    """:func:`session_row` as a :class:`~bus.core.models.SessionInfo`."""
    from bus.core.models import SessionInfo

    return SessionInfo(**session_row(data, sid))


def default_handle(host: str, sid: str) -> str:
    """The handle a session gets when it names none: ``<host>:<sid>``."""
    return f"{host}:{sid}"


def stored(fields: dict[str, str], sid: str) -> tuple[dict[str, str], list[str]]:
    """``fields`` (strings, as written) for session ``sid``'s record: what to set, and what
    to delete (the fields at their unstored value). ``handle`` is judged against the
    ``host`` in ``fields``; a caller that sets one without the other passes both."""
    out, drop = session_fields(fields)
    if out.get("state") == IDLE:
        del out["state"]
        drop.append("state")
    host = out.get("host")
    if host is not None and out.get("handle") == default_handle(host, sid):
        del out["handle"]
        drop.append("handle")
    return out, drop


def as_read(data: dict[str, str], sid: str) -> dict[str, str]:
    """A record's hash with its default handle put back (``data`` when it keeps one)."""
    if "handle" in data or not data.get("host"):
        return data
    return {**data, "handle": default_handle(data["host"], sid)}


def record_row(data: dict[str, str], sid: str) -> dict[str, Any]:
    """The record's fields (``session_row``), omitted defaults put back."""
    return session_row(as_read(data, sid), sid)


def record_info(data: dict[str, str], sid: str) -> SessionInfo:
    """The record as a :class:`~bus.core.models.SessionInfo`, omitted defaults put back."""
    return session_from_hash(as_read(data, sid), sid)


def seen_state(host: str | None, state: str | None) -> str | None:
    """A record's ``state`` read alone beside its ``host``: ``idle`` when the record
    exists (it has a host) and keeps none; ``None`` for no record."""
    if state:
        return state
    return IDLE if host else None
