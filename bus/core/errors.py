"""One error base class with a subclass per kind of refusal.

Every surface maps these the same way: the CLI prints ``str(err)`` on stderr and exits
with ``err.exit_code``; the HTTP gateway answers 400 for :class:`BadInput`; the MCP
server returns the error text. ``code`` is the machine-readable reason.
"""

from __future__ import annotations

# Not ``typing.TYPE_CHECKING``: importing typing alone costs the read lane several ms
# (bus.lanes.read imports this module).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class BusError(Exception):
    """Base of every refusal the bus makes on purpose."""

    code = "error"
    exit_code = 1

    def __init__(self, message: str, *, code: str | None = None, **details: Any) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.details = details

    def to_json(self) -> dict[str, Any]:
        return {"ok": False, "error": self.code, "message": str(self), **self.details}


class BadInput(BusError):
    """The caller's input is malformed; nothing was written."""

    code = "bad_input"
    exit_code = 2


class NotFound(BusError):
    """A session, thread, message or item that does not exist."""

    code = "not_found"


class Refused(BusError):
    """Well-formed but not allowed (``not_a_party``, ``thread_terminal``, ...)."""

    code = "refused"


class Unauthorized(BusError):
    """Authentication is on and the caller's token is missing, invalid or lacks a scope."""

    code = "unauthorized"


class Ambiguous(BusError):
    """A handle names more than one live session; ``candidates`` lists them."""

    code = "ambiguous"


class Unavailable(BusError):
    """Redis (or another backing service) did not answer."""

    code = "unavailable"
    exit_code = 3


class RateLimited(BusError):
    """A sender over its rate (``rate_limited``) or a receiver's inbox at its cap
    (``inbox_full``); nothing was stored. HTTP answers 429."""

    code = "rate_limited"
    exit_code = 4


class NotDurable(BusError):
    """A send the store took but could not confirm at the durability level asked for
    (``INBOX_DURABILITY``, ``--durability``) within its bound: not acknowledged. It may be
    stored; a resend of the same id is stored at most once, so resending is safe."""

    code = "not_durable"


class StoreRefused(BusError):
    """The store answers but refuses writes (``reason``: ``disk`` its disk is full or its
    snapshot failed, ``read_only`` a replica, ``memory`` at its maxmemory); nothing was
    written. ``fix`` says what to do. HTTP answers 503."""

    code = "store_refused"
