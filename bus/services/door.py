"""prox's door (``POST /send``): local delivery on this host, with the bus's own rules.

The same checks as a send through the bus, where they do not need the store: the sender
settled from the token (``bus.trust.access.Access.settle``), the sender's one rate bucket (the
one ``/v1/send`` and the CLI spend from), the unread cap counted on the floor, and only
sessions this host knows: one whose floor folder exists (a session opened here), or,
when the store answers, one it has. An unknown id never becomes a folder.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bus.core.errors import NotFound, Unavailable
from bus.core.models import SessionInfo, parse_message
from bus.store.redis_errors import StoreError
from bus.trust.tokens import SCOPE_WRITE

from .id_owner import id_refusal
from .send_many import inbox_full, sender_of

if TYPE_CHECKING:
    from bus.core.settings import Settings
    from bus.delivery.floor import Floor, Via
    from bus.trust.access import Access


class Door:
    """Local sends on this host's floor, checked by ``access`` and bounded by
    ``limit_sender`` (:meth:`bus.services.send_rate.SendRate.limit`)."""

    def __init__(
        self,
        floor: Floor,
        settings: Settings,
        *,
        access: Access,
        session: Callable[[str], SessionInfo],
        limit_sender: Callable[[str], None],
    ) -> None:
        self.floor, self.settings, self.access = floor, settings, access
        self.session, self.limit_sender = session, limit_sender

    def _known_here(self, sid: str) -> bool:
        if self.floor.session_dir(sid).is_dir():
            return True
        try:
            self.session(sid)
        except (NotFound, Unavailable, StoreError):
            return False
        return True

    def send_local(self, data: dict[str, Any], token: str | None) -> tuple[Via, str]:
        """Deliver one message by the local precedence (socket, else file); ``(via, id)``.

        Refused before anything is written: a bad token or forged sender, a member's message
        outside its workspace, bad fields, an unknown session (``unknown_session``), an
        id another sender's line on this floor carries (``id_taken``), a full
        floor (``inbox_full``), a sender over its rate (``rate_limited``; skipped when the
        store does not answer, so the door works without Redis).
        """
        claims = self.access.claims(token, SCOPE_WRITE)
        msg = parse_message(self.access.settle(data, claims))
        if not self._known_here(msg.to_id):
            raise NotFound(
                f"no session {msg.to_id!r} on this host; open it with: "
                f"inbox session open {msg.to_id}",
                code="unknown_session",
            )
        if "id" in data:  # a caller's id: its own, or refused (bus.services.id_owner)
            refusal = id_refusal(msg, self.floor.id_sender(msg.to_id, msg.id))
            if refusal is not None:
                raise refusal
        cap = self.settings.max_unread
        if cap > 0 and self.floor.pending_count(msg.to_id) >= cap:
            raise inbox_full(msg.to_id, cap)
        try:
            self.limit_sender(sender_of(msg, claims))
        except (Unavailable, StoreError):
            pass  # prox's door works without Redis; when Redis answers, its senders are bounded
        via, _path = self.floor.write_line(msg.to_id, msg.wire())
        return via, msg.id
