"""The session id rule, in a module light enough for the drain's fast lane (no pydantic).

bus.core.models re-exports both names; the pydantic models use the same pattern.
"""

from __future__ import annotations

from .errors import BadInput
from .lane_names import SESSION_ID_MAX, is_session_id

# The session id rule as a pattern, for the models and their JSON Schemas; the rule itself
# is bus.core.lane_names.is_session_id (tests/unit/test_ids.py holds the two equal).
SESSION_ID_PATTERN = rf"^[A-Za-z0-9._-]{{1,{SESSION_ID_MAX}}}$"
MESSAGE_ID_PATTERN = r"^[A-Za-z0-9._:-]{1,128}$"


def check_session_id(sid: object, what: str = "session id") -> str:
    """Return ``sid`` if it is a valid session id, else raise :class:`BadInput`.

    Called before a session id becomes a path or a Redis key.
    """
    if not isinstance(sid, str) or not is_session_id(sid):
        shown = repr(sid)[:60]
        raise BadInput(f"invalid {what} {shown}: must match {SESSION_ID_PATTERN}")
    return sid


__all__ = ["MESSAGE_ID_PATTERN", "SESSION_ID_PATTERN", "check_session_id", "is_session_id"]
