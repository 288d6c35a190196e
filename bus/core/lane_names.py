"""What the fast lanes (bus.lanes) and the library both name, defined once.

The lanes answer the hottest commands without importing the library, so what they share
with it lives here, in a module that imports only ``os``: the files of a session's floor, the
session id's alphabet, the session states, the durability levels, the commands each lane
takes, the warm command server's socket and greeting, and where the home is.
"""

from __future__ import annotations

import os

# -- the home ---------------------------------------------------------------------------

DEFAULT_HOME = "~/.local/share/inbox"


def home_dir(env: dict[str, str] | os._Environ[str] | None = None) -> str:
    """``$INBOX_HOME``, else ``~/.local/share/inbox``, its ``~`` expanded."""
    env = os.environ if env is None else env
    return os.path.expanduser(env.get("INBOX_HOME") or DEFAULT_HOME)


# -- a session's floor (bus.delivery.floor) ----------------------------------------------

FLOOR = "inbox"  # $INBOX_HOME/inbox/<sid>/: a session's floor folder
MESSAGES = "messages.jsonl"
DRAINING_PREFIX = "messages.draining."
# Notice ids a drain took while Redis was down, confirmed by the next drain or delivery.
PENDING_MARKS = "marks.pending.jsonl"
# ``$INBOX_HOME/seen/<sid>``: its time is when the session's ``last_seen`` was last told to
# Redis (kept out of the floor, whose folder means "opened here").
SEEN = "seen"

# -- a session id (bus.core.ids) ----------------------------------------------------------

SESSION_ID_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-"
SESSION_ID_MAX = 180


def is_session_id(value: object) -> bool:
    """Whether ``value`` is a valid session id: 1 to 180 of :data:`SESSION_ID_CHARS`, not
    ``.`` or ``..`` (checked without ``re``, whose import the hook's lane does not pay)."""
    return (
        isinstance(value, str)
        and 0 < len(value) <= SESSION_ID_MAX
        and not value.strip(SESSION_ID_CHARS)
        and value not in (".", "..")
    )


# A session record's states (bus.core.models.SessionInfo.state).
SESSION_STATES = ("idle", "running", "closing", "closed")

# -- the durability a send asks for (INBOX_DURABILITY, ``--durability``) ---------------------

DURABILITY_LEVELS = ("memory", "disk", "replica")  # weakest first (bus.core.durability)


def durability_level(raw: str) -> str | None:
    """The durability level ``raw`` names (any case, spaces around it), else None."""
    level = raw.strip().lower()
    return level if level in DURABILITY_LEVELS else None


# -- the commands each lane takes -----------------------------------------------------------

READ_COMMANDS = ("status", "threads", "read", "sent", "receipt", "read-inbox")
WRITE_COMMANDS = ("send", "reply", "withdraw", "decide")

# -- the warm command server (bus.surfaces.command_server) ----------------------------------

COMMAND_MAGIC = b"inbox-cmd-1"
COMMAND_SOCKET = "commands.sock"  # its file name, beside the embedded Redis's socket
SOCKET_PATH_MAX = 100  # bytes: a unix socket's path is at most 108 (Linux), 104 (macOS)
