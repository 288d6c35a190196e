"""The facade's sending side: send (one, a batch, prox's local door), threads, receipts.

A part of :class:`bus.api.facade.Bus`: each call checks who may act
(:mod:`bus.trust.access`), then calls the service that does it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from bus.core.durability import level_of
from bus.core.models import Message, SessionInfo, parse_message
from bus.services import id_owner, send_many
from bus.store.redis_errors import translate_redis_errors
from bus.trust.tokens import SCOPE_READ, SCOPE_WRITE, Claims

from .parts import Parts

if TYPE_CHECKING:
    from bus.delivery.floor import Via


@translate_redis_errors
class Conversing(Parts):
    """Sends, threads and receipts."""

    # -- sending ----------------------------------------------------------------------

    def resolve(self, handle: str) -> SessionInfo:
        """The one live session with ``handle``; an error listing candidates otherwise."""
        return self.sessions.resolve(handle)

    def send(
        self,
        fields: dict[str, Any] | Message,
        *,
        wait: bool = False,
        timeout: float | None = None,
        token: str | None = None,
        durability: str | None = None,
    ) -> dict[str, Any]:
        """Validate, store and route one message; returns the send answer.

        With ``INBOX_SECRET`` set the sender comes from the token (``INBOX_TOKEN`` or
        ``token``), never from the body: a ``from`` or ``from_session`` naming someone else
        is refused. Without a secret the message is marked unverified. ``durability``
        (or a ``durability`` field beside the message's) overrides ``INBOX_DURABILITY``
        for this send: its answer's ``durable`` says the level met, and a level not met
        within ``INBOX_DURABILITY_TIMEOUT_S`` is :class:`~bus.core.errors.NotDurable`.
        """
        data = fields.wire() if isinstance(fields, Message) else dict(fields)
        asked = data.pop("durability", None)
        level = level_of(durability or (str(asked) if asked else None), self.settings.durability)
        if "to_id" not in data and data.get("to"):
            data["to_id"] = self.resolve(str(data["to"])).session
        claims = self.claims(token, SCOPE_WRITE)
        msg = parse_message(self.access.settle(data, claims))
        self._check_party(msg)
        if "id" in data:  # a caller's id: its own, or refused (bus.services.id_owner)
            refusal = id_owner.id_refusal(msg, id_owner.owners(self.store, [msg.id]).get(msg.id))
            if refusal is not None:
                raise refusal
        self.limit_sender(send_many.sender_of(msg, claims))
        return self.router.post(msg, wait=wait, timeout=timeout, durability=level)

    def _check_party(self, msg: Message) -> None:
        """Naming an existing thread needs the sender and the receiver to be its parties:
        the owner fixed them, and a computed thread id is no invitation."""
        if not msg.thread:
            return
        parties = self.conversation.parties(msg.thread)
        exists = parties or self.store.inbox.thread_exists(msg.thread)
        refusal = send_many.party_refusal(msg, parties, bool(exists))  # one rule for a batch too
        if refusal is not None:
            raise refusal

    def limit_sender(self, sender: str) -> None:
        """Bounded floods: one token from the sender's bucket, or ``rate_limited``."""
        self.send_rate.limit(sender)

    def claims(self, token: str | None, scope: str, *, session: str | None = None) -> Claims | None:
        """The caller's verified token claims, or None when authentication is off
        (see :meth:`bus.trust.access.Access.claims`)."""
        return self.access.claims(token, scope, session=session)

    def send_many(
        self,
        items: Sequence[dict[str, Any] | Message],
        *,
        token: str | None = None,
        durability: str | None = None,
    ) -> list[dict[str, Any]]:
        """Send a batch: validated whole (one bad item refuses it all, nothing written),
        each receiver looked up once, one pipelined append and one delivery per receiver.
        Answers as ``send`` would, one per item, in order, confirmed at ``durability``
        (else ``INBOX_DURABILITY``) once per pipeline. See :mod:`bus.services.send_many`."""
        level = level_of(durability, self.settings.durability)
        return self.batches.send_many(items, token=token, durability=level)

    def send_local(self, data: dict[str, Any], *, token: str | None = None) -> tuple[Via, str]:
        """prox's ``POST /send``: deliver on this host, ``(via, id)`` (see :mod:`bus.services.door`)."""
        return self.door.send_local(data, token)

    def post(
        self, msg: Message, *, wait: bool = False, timeout: float | None = None
    ) -> dict[str, Any]:
        """Store and route a message whose sender is already settled (the library's own
        replies, retractions, decisions and item messages go through here)."""
        return self.router.post(msg, wait=wait, timeout=timeout)

    def thread_for(self, msg: Message) -> str:
        return self.router.thread_for(msg)

    def floor_listening(self, info: SessionInfo) -> bool:
        return self.router.floor_listening(info)

    # -- threads ----------------------------------------------------------------------

    def threads(self, sid: str, *, token: str | None = None) -> dict[str, Any]:
        """The session's threads, newest first."""
        self.claims(token, SCOPE_READ, session=sid)
        self.session(sid)
        return {"ok": True, "session": sid, "threads": self.conversation.threads(sid)}

    def read(
        self, sid: str, thread: str, *, mark_read: bool = False, token: str | None = None
    ) -> dict[str, Any]:
        """A whole thread, oldest first; ``mark_read`` marks the session's messages read."""
        self.claims(token, SCOPE_READ, session=sid)
        return {"ok": True, **self.conversation.read(sid, thread, mark_read=mark_read)}

    def reply(
        self, sid: str, thread: str, text: str, *, token: str | None = None
    ) -> dict[str, Any]:
        """Answer into the other parties' inboxes under ``thread``; never a turn for them."""
        claims = self.claims(token, SCOPE_WRITE, session=sid)
        self.limit_sender(claims.actor if claims else sid)
        return self.conversation.reply(sid, thread, text)

    def withdraw(self, msg_id: str, by: str, *, token: str | None = None) -> dict[str, Any]:
        """Unsend (before any notice) or retract (after) a message; only its sender may."""
        self.claims(token, SCOPE_WRITE, session=by)
        return self.conversation.withdraw(msg_id, by)

    # -- receipts and the outbox (the sender's side) ---------------------------------------

    def receipt(
        self,
        msg_id: str,
        *,
        by: str | None = None,
        wait_for: str | None = None,
        timeout: float | None = None,
        token: str | None = None,
    ) -> dict[str, Any]:
        """What became of a message, for its sender only (``by``, INBOX_SESSION or the
        token's subject); ``wait_for`` blocks until it is noticed, read or answered."""
        return self.receipts.receipt(msg_id, by=by, token=token, wait_for=wait_for, timeout=timeout)

    def sent(
        self, sid: str, *, state: str | None = None, limit: int = 50, token: str | None = None
    ) -> dict[str, Any]:
        """The session's outbox: its sent messages, newest first, each with its receipt."""
        return self.receipts.sent(sid, state=state, limit=limit, token=token)
