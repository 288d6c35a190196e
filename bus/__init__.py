"""The agent inbox bus: messages between coding-agent sessions that never become turns.

The names below are imported on first use, so a small entry point (``bus.entry``, run at
every tool step of a harness) does not pay for the library, pydantic and redis.
"""

from __future__ import annotations

# Not ``typing.TYPE_CHECKING``: importing typing alone costs a hook run several ms.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .api import Bus, connect
    from .errors import (
        Ambiguous,
        BadInput,
        BusError,
        NotFound,
        Refused,
        Unauthorized,
        Unavailable,
    )
    from .models import Message, SendAnswer, SessionInfo, parse_message
    from .settings import Settings

_WHERE = {
    "Bus": "api",
    "connect": "api",
    "Ambiguous": "errors",
    "BadInput": "errors",
    "BusError": "errors",
    "NotFound": "errors",
    "Refused": "errors",
    "Unauthorized": "errors",
    "Unavailable": "errors",
    "Message": "models",
    "SendAnswer": "models",
    "SessionInfo": "models",
    "parse_message": "models",
    "Settings": "settings",
}


def __getattr__(name: str) -> Any:
    from importlib import import_module

    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'bus' has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "Ambiguous",
    "BadInput",
    "Bus",
    "BusError",
    "Message",
    "NotFound",
    "Refused",
    "SendAnswer",
    "SessionInfo",
    "Settings",
    "Unauthorized",
    "Unavailable",
    "connect",
    "parse_message",
]
