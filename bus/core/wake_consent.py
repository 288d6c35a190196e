"""Wake commands this host will not run until a person keeps them here.

The worker runs only the wake command kept on the session's host
(``$INBOX_HOME/inbox/<sid>/wake_cmd``, bus.delivery.kept_wake), never the one in the
session's record in Redis: whoever can write to Redis could put any shell line there. A
session whose record names a wake command with none kept beside it (one opened by 0.1.0,
which kept it in Redis only) is therefore never woken by it: its wake is off until a
person runs the command :func:`fix` names on its host (``inbox session open ...
--wake-cmd ...``). ``inbox up`` names these sessions, ``inbox status`` shows their wake as
off with the reason, ``inbox doctor`` exits 1 while there is one.

Standard library only: the read lane's ``status`` uses it too.
"""

from __future__ import annotations

import os
import shlex

# Not ``typing.TYPE_CHECKING``: importing typing alone costs the read lane several ms.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

WAKE_FILE = "wake_cmd"  # bus.delivery.kept_wake.WAKE_FILE (tests/integration/durability/test_upgrade.py holds them equal)
REASON = (
    "its wake command is in the session's record only (kept there by inbox 0.1.0): this host "
    "runs only one a person kept here, so the session is not woken by it"
)
EFFECT = "not woken by its wake command while idle"


def fix(row: dict[str, Any]) -> str:
    """The command that keeps ``row``'s wake command on its host (run there): the session
    opened again with what its record says (its handle, parent and inbox switch; its
    workspace is kept)."""
    sid = row["session"]
    argv = ["inbox", "session", "open", sid]
    if row.get("handle") and row["handle"] != f"{row.get('host')}:{sid}":
        argv += ["--handle", row["handle"]]
    if row.get("parent"):
        argv += ["--parent", row["parent"]]
    if row.get("agent_inbox") is not None:
        argv.append("--agent-inbox" if row["agent_inbox"] else "--no-agent-inbox")
    argv += ["--wake-cmd", row["wake_cmd"]]
    return shlex.join(argv)


def wake_off(home: str, host: str, rows: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """The sessions of ``rows`` living on ``host`` (not closed) whose record names a wake
    command that ``home`` keeps none of: ``{sid: {"state": "off", "reason", "fix"}}``."""
    out: dict[str, dict[str, str]] = {}
    for row in rows:
        sid = row.get("session")
        if not sid or row.get("host") != host or not row.get("wake_cmd"):
            continue
        if row.get("state") == "closed" or os.sep in sid or sid in (".", ".."):
            continue
        if os.path.isfile(os.path.join(home, "inbox", sid, WAKE_FILE)):
            continue
        out[sid] = {"state": "off", "reason": REASON, "fix": fix(row)}
    return out


__all__ = ["EFFECT", "REASON", "WAKE_FILE", "fix", "wake_off"]
