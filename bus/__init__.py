"""The agent inbox bus: messages between coding-agent sessions that never become turns."""

from .api import Bus, connect
from .errors import Ambiguous, BadInput, BusError, NotFound, Refused, Unauthorized, Unavailable
from .models import Message, SendAnswer, SessionInfo, parse_message
from .settings import Settings

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
