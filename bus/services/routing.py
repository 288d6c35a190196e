"""Routing: a settled message into its receiver's queue, and a delivery asked for.

The path of a send, top to bottom: the facade (:class:`bus.api.Bus`) validates and
authenticates it, then :meth:`Router.post` looks the receiver up, computes the thread,
appends it once (:meth:`bus.store.store.Store.queue.append`, the sender's receipt in the same round
trip) and asks the dispatcher for a delivery when none is pending. The host's worker
then runs :func:`bus.delivery.engine.deliver` → :mod:`bus.delivery.engine` → :class:`bus.delivery.inbox.Inbox`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bus.core.clock import SYSTEM, Clock
from bus.core.durability import level_of
from bus.core.errors import BadInput, NotDurable, RateLimited
from bus.core.models import Message, Recipient, SendAnswer, SessionInfo
from bus.core.policy import gave_work
from bus.core.receipt_rules import recipient_state
from bus.core.status_view import host_state as beat_host
from bus.core.threads import thread_of
from bus.store import packing

if TYPE_CHECKING:
    from bus.core.settings import Settings
    from bus.delivery.dispatch import Dispatcher
    from bus.delivery.floor import Floor
    from bus.delivery.inbox import Inbox
    from bus.delivery.receipts import Receipts
    from bus.store.store import Store


class Router:
    """Posts messages and kicks deliveries for one store (providers are called on use)."""

    def __init__(
        self,
        store: Callable[[], Store],
        floor: Floor,
        settings: Settings,
        *,
        receipts: Receipts,
        inbox: Inbox,
        dispatcher: Callable[[], Dispatcher],
        verified: bool,
        clock: Clock = SYSTEM,
    ) -> None:
        self._store, self.floor, self.settings = store, floor, settings
        self.receipts, self.inbox, self._dispatcher = receipts, inbox, dispatcher
        self.verified, self.clock = verified, clock

    @property
    def store(self) -> Store:
        return self._store()

    def kick(self, host: str, sid: str) -> None:
        """Ask ``host``'s worker for a delivery of ``sid`` unless one is pending already."""
        if self.store.queue.mark_pending(sid):
            self._dispatcher().request(host, sid)

    def thread_for(self, msg: Message) -> str:
        """The thread ``msg`` lands in (see :func:`bus.core.threads.thread_of`)."""
        return thread_of(msg.to_id, msg.wire())[1]

    def floor_listening(self, info: SessionInfo) -> bool:
        """Whether a harness on this host listens on ``info``'s socket now."""
        if info.host != self.settings.host:
            return False
        try:
            return self.floor.socket_path(info.session).exists()
        except BadInput:
            return False

    def post(
        self,
        msg: Message,
        *,
        wait: bool = False,
        timeout: float | None = None,
        durability: str | None = None,
    ) -> dict[str, Any]:
        """Store and route a message whose sender is already settled; the send
        answer (``bounced`` for an unknown receiver, ``duplicate`` for a resent id), its
        ``durable`` the level confirmed (``durability``, else ``INBOX_DURABILITY``;
        :class:`~bus.core.errors.NotDurable` when it was not within the bound)."""
        level = level_of(durability, self.settings.durability)
        if msg.verified is None:
            msg = msg.model_copy(update={"verified": self.verified})
        sid = msg.to_id
        store = self.store
        facts = ""
        if msg.from_session:
            # The receiver's wake fact about the sending session, read with its record:
            # the delivery then looks nothing up for it (bus.delivery.inbox).
            info, recorded, parent = store.sessions.session_and_gave(sid, msg.from_session)
            if info is not None:
                facts = "g" if gave_work(recorded, parent, sid, info.handle) else "-"
        else:
            info = store.sessions.get_session(sid)
        if info is None:
            self.receipts.bounced(msg, sid, f"no session {sid!r} is registered")
            return SendAnswer(
                ok=False,
                id=msg.id,
                state="bounced",
                recipient=Recipient(session=sid, state="unknown"),
                reason=f"no session {sid!r} is registered",
            ).to_json()
        thread = self.thread_for(msg)
        now = self.clock.now_ms()
        answer = SendAnswer(
            id=msg.id,
            thread=thread,
            state="stored",
            recipient=Recipient(
                session=sid,
                host=info.host,
                # A harness unseen for INBOX_STALE_S: stored, but nobody may hear it soon.
                state=recipient_state(
                    info.state, info.last_seen or info.opened_at, now, self.settings.stale_s
                ),
                listening=self.floor_listening(info),
                last_seen=info.last_seen or None,
            ),
        )
        if wait:
            self.inbox.register_waiter(sid, msg.id)
        beat: list[tuple[int | None, int | None]] = []
        try:
            new, first, dispatch = store.queue.append(
                sid,
                msg.id,
                msg.line(),
                packing.keep(answer.to_json(), sid, msg.id),
                thread,
                also=lambda pipe: self.receipts.open_many(
                    pipe, [(msg, sid, thread, "stored", "")], appended=True
                ),
                max_held=self.settings.max_unread,
                facts=facts,
                receipt=(msg.from_, msg.from_session or "", ""),
                # The kick list (the dispatcher's first try) pushed in the append's call.
                kick_host=info.host if self.settings.kick == "list" else None,
                durability=(level, self.settings.durability_timeout_s),
                # Whether a worker serves the receiver's host, read in the same round trip.
                beat_into=beat,
                beat_of=info.host,
            )
        except RateLimited:  # inbox_full: what was not stored is not in the outbox either
            self.receipts.unlist_refused([(msg, sid)])
            raise
        except NotDurable:  # stored, not acknowledged: nobody waits for its answer here
            if wait:
                store.inbox.drop_waiter(sid, msg.id)
            raise
        host_state = beat_host(beat[0] if beat else (None, None), now, self.settings.host_down_s)
        if not new:
            prior = packing.restore(first, sid, msg.id)
            if prior.get("state") == "stored" and isinstance(prior.get("recipient"), dict):
                prior["recipient"]["host_state"] = host_state
            prior["duplicate"] = True
            prior["durable"] = level
            if wait and prior.get("state") == "stored":
                return settled(self.inbox.wait_answer(sid, msg.id, prior, timeout))
            if wait:
                store.inbox.drop_waiter(sid, msg.id)
            return prior
        if dispatch:
            self._dispatcher().request(info.host, sid)
        answer.durable = level  # type: ignore[assignment]  # one of the levels (level_of)
        out = answer.to_json()
        out["recipient"]["host_state"] = host_state  # a down host keeps it waiting
        if wait:
            return settled(self.inbox.wait_answer(sid, msg.id, out, timeout))
        return out


def settled(answer: dict[str, Any]) -> dict[str, Any]:
    """A waited send's answer: ``host_state`` (read at the send) while its message is still
    stored (``stored``, or the ``timeout`` error), as a send's; one its turn answered (or
    its session's close ended) has no host to wait for."""
    rcpt = answer.get("recipient")
    waiting = answer.get("state") == "stored" or answer.get("error") == "timeout"
    if not waiting and isinstance(rcpt, dict) and "host_state" in rcpt:
        answer["recipient"] = {k: v for k, v in rcpt.items() if k != "host_state"}
    return answer
