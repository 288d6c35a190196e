"""Durability levels of an acknowledged send: the store command that confirms each, and
what its reply means. Pure: the store runs the command (bus.store.durable), the send
services judge its reply here.

- ``memory``: the store took the write. A killed bus process loses nothing; a store
  killed or a machine powered off loses what its append-only file had not fsynced yet
  (up to about a second with ``appendfsync everysec``); a failover loses what the
  replica had not received.
- ``disk``: the store's append-only file has it on disk (``WAITAOF 1 0``; a server
  without WAITAOF, older than 7.2, meets it only when it runs ``appendfsync always``).
  A power cut keeps it; a failover to a replica that had not received it loses it.
- ``replica``: at least one replica has it (``WAIT 1``). A failover that promotes
  that replica keeps it.
"""

from __future__ import annotations

from typing import Any

from .errors import BadInput, NotDurable
from .lane_names import durability_level
from .server_version import identify

# The words a server's error reply starts with, and what they mean for the level.
_NO_COMMAND = "unknown command"
_REPLIES = (
    (
        "waitaof cannot be used when numlocal is set but appendonly is disabled",
        "the store keeps no append-only file (appendonly no)",
    ),
    ("waitaof cannot be used with replica instances", "the store is a replica"),
    ("wait cannot be used with replica instances", "the store is a replica"),
)


def level_of(raw: str | None, default: str) -> str:
    """The level a send asked for (``raw``, e.g. ``--durability``), else ``default``
    (``INBOX_DURABILITY``); an unknown name is :class:`BadInput`."""
    if raw is None or raw == "":
        return default
    level = durability_level(raw)
    if level is None:
        raise BadInput(
            f"durability must be one of memory, disk, replica; got {raw!r}",
            code="bad_durability",
        )
    return level


def wait_command(level: str, timeout_s: float) -> tuple[Any, ...] | None:
    """The command that confirms ``level`` for the writes before it on its connection,
    waiting at most ``timeout_s``; None for ``memory`` (the write's own reply is it)."""
    ms = max(1, int(timeout_s * 1000))
    if level == "disk":
        return ("WAITAOF", 1, 0, ms)
    if level == "replica":
        return ("WAIT", 1, ms)
    return None


def lacks_wait(reply: Any) -> bool:
    """Whether ``reply`` (an error) says the server has no such command (WAITAOF before 7.2)."""
    return isinstance(reply, Exception) and _NO_COMMAND in str(reply).lower()


def shortfall(level: str, reply: Any, timeout_s: float) -> str | None:
    """Why ``reply`` to :func:`wait_command` does not meet ``level``; None when it does."""
    if isinstance(reply, Exception):
        low = str(reply).strip().lower().removeprefix("err ")
        why = next((w for start, w in _REPLIES if low.startswith(start)), None)
        return why or f"the store answered {str(reply).strip()!r}"
    if level == "disk":
        local = int(reply[0]) if isinstance(reply, list | tuple) and reply else 0
        return (
            None if local >= 1 else f"its append-only file did not fsync it within {timeout_s:g}s"
        )
    if level == "replica":
        return None if int(reply) >= 1 else f"no replica acknowledged it within {timeout_s:g}s"
    return None


def has_waitaof(info: dict[str, Any]) -> bool:
    """Whether the server INFO describes has ``WAITAOF`` (Redis and Valkey 7.2 and later)."""
    return identify(info)[1] >= (7, 2, 0)


def unmet_by(level: str, info: dict[str, Any], fsyncs_always: bool) -> str | None:
    """Why a store whose INFO (server, persistence, replication) is ``info`` cannot meet
    ``level`` at all, so every send at it is refused ``not_durable``; None when it can.
    ``fsyncs_always``: it runs ``appendfsync always`` (what a server without WAITAOF needs)."""
    if level == "disk":
        if str(info.get("aof_enabled", "0")) != "1":
            return "the store keeps no append-only file (appendonly no)"
        if not has_waitaof(info) and not fsyncs_always:
            return "the store has no WAITAOF (older than 7.2) and does not run appendfsync always"
    if level == "replica" and int(str(info.get("connected_slaves", 0) or 0)) < 1:
        return "the store has no replica connected"
    return None


def not_durable(level: str, why: str, ids: list[str]) -> NotDurable:
    """The refusal of a send (or a batch) whose level was not met: what failed, and
    that resending the same ids is safe (a resent id is stored at most once)."""
    shown = ", ".join(ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")
    resend = (
        f"resend with the same id (inbox send --id {ids[0]} ...) once the store can: "
        "a resent id is stored at most once"
        if len(ids) == 1
        else "resend the same messages with the same ids: a resent id is stored at most once"
    )
    return NotDurable(
        f"not acknowledged at durability {level}: {why}; {shown} may be stored but "
        f"{'is' if len(ids) == 1 else 'are'} not known to be kept; {resend}",
        level=level,
        ids=ids,
    )
