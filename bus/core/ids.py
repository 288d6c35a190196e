"""The session id rule, in a module light enough for the drain's fast lane (no pydantic).

bus.core.models re-exports both names; the pydantic models use the same pattern.
"""

from __future__ import annotations

import re

from .errors import BadInput

SESSION_ID_PATTERN = r"^[A-Za-z0-9._-]{1,180}$"
MESSAGE_ID_PATTERN = r"^[A-Za-z0-9._:-]{1,128}$"
_SESSION_ID_RE = re.compile(SESSION_ID_PATTERN)


def check_session_id(sid: object, what: str = "session id") -> str:
    """Return ``sid`` if it is a valid session id, else raise :class:`BadInput`.

    Called before a session id becomes a path or a Redis key.
    """
    if not isinstance(sid, str) or not _SESSION_ID_RE.fullmatch(sid) or sid in (".", ".."):
        shown = repr(sid)[:60]
        raise BadInput(f"invalid {what} {shown}: must match {SESSION_ID_PATTERN}")
    return sid


def is_session_id(value: object) -> bool:
    """Whether ``value`` is a valid session id (:func:`check_session_id` would pass it)."""
    return (
        isinstance(value, str)
        and bool(_SESSION_ID_RE.fullmatch(value))
        and value not in (".", "..")
    )


__all__ = ["MESSAGE_ID_PATTERN", "SESSION_ID_PATTERN", "check_session_id", "is_session_id"]
