"""prox's door (``POST /send``): local delivery on this host, with the bus's own rules.

The same checks as a send through the bus, where they do not need the store: the sender
settled from the token (``bus.trust.access.Access.settle``), the sender's one rate bucket (the
one ``/v1/send`` and the CLI spend from), the unread cap counted on the floor, and only
sessions this host knows: one whose floor folder exists (a session opened here), or,
when the store answers, one it has. An unknown id never becomes a folder.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import redis

from bus.core.errors import NotFound, Unavailable
from bus.core.models import parse_message
from bus.trust.tokens import SCOPE_WRITE

from .send_many import inbox_full, sender_of

if TYPE_CHECKING:
    from bus.api import Bus
    from bus.delivery.floor import Via


def _known_here(bus: Bus, sid: str) -> bool:
    if bus.floor.session_dir(sid).is_dir():
        return True
    try:
        bus.sessions.get(sid)
    except (NotFound, Unavailable, redis.RedisError):
        return False
    return True


def send_local(bus: Bus, data: dict[str, Any], token: str | None) -> tuple[Via, str]:
    """Deliver one message by the local precedence (socket, else file); ``(via, id)``.

    Refused before anything is written: a bad token or forged sender, a member's message
    outside its workspace, bad fields, an unknown session (``unknown_session``), a full
    floor (``inbox_full``), a sender over its rate (``rate_limited``; skipped when the
    store does not answer, so the door works without Redis).
    """
    claims = bus.claims(token, SCOPE_WRITE)
    msg = parse_message(bus.access.settle(data, claims))
    if not _known_here(bus, msg.to_id):
        raise NotFound(
            f"no session {msg.to_id!r} on this host; open it with: inbox session open {msg.to_id}",
            code="unknown_session",
        )
    cap = bus.settings.max_unread
    if cap > 0 and bus.floor.pending_count(msg.to_id) >= cap:
        raise inbox_full(msg.to_id, cap)
    try:
        bus.limit_sender(sender_of(msg, claims))
    except (Unavailable, redis.RedisError):
        pass  # prox's door works without Redis; when Redis answers, its senders are bounded
    via, _path = bus.floor.deliver(msg.to_id, msg.wire())
    return via, msg.id
