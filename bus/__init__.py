"""The agent inbox bus: messages between coding-agent sessions that never become turns.

The names below are imported on first use, so a small entry point (``bus.lanes.entry``, run at
every tool step of a harness) does not pay for the library, pydantic and redis.
"""

from __future__ import annotations

# Not ``typing.TYPE_CHECKING``: importing typing alone costs a hook run several ms.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from bus.core.errors import (
        Ambiguous,
        BadInput,
        BusError,
        NotFound,
        Refused,
        Unauthorized,
        Unavailable,
    )
    from bus.core.models import Message, SendAnswer, SessionInfo, parse_message
    from bus.core.settings import Settings

    from .api import Bus, connect
    from .core.version import __version__

_WHERE = {
    "__version__": "core.version",
    "Bus": "api",
    "connect": "api",
    "Ambiguous": "core.errors",
    "BadInput": "core.errors",
    "BusError": "core.errors",
    "NotFound": "core.errors",
    "Refused": "core.errors",
    "Unauthorized": "core.errors",
    "Unavailable": "core.errors",
    "Message": "core.models",
    "SendAnswer": "core.models",
    "SessionInfo": "core.models",
    "parse_message": "core.models",
    "Settings": "core.settings",
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
    "__version__",
    "connect",
    "parse_message",
]
