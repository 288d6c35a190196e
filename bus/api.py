"""The Python API: ``from bus import connect; b = connect()``.

One :class:`Bus` per connection. Every surface (CLI, MCP server, HTTP gateway, Celery
tasks) parses its input and makes one call here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis

from bus.core.clock import SYSTEM, Clock
from bus.core.errors import BadInput, RateLimited
from bus.core.models import DeliverAnswer, Message, SessionInfo, check_session_id, parse_message
from bus.core.settings import Settings
from bus.delivery.dispatch import Dispatcher, default_dispatcher
from bus.delivery.engine import DeliveryReport
from bus.delivery.floor import Floor, Via
from bus.delivery.inbox import Inbox
from bus.delivery.kick_list import ListDispatcher
from bus.delivery.receipts import Receipts
from bus.services.conversation import Conversation
from bus.services.routing import Router
from bus.services.send_many import BatchSender
from bus.services.sessions import Sessions, check_host
from bus.store.connection import redis_client
from bus.store.keys import Keys
from bus.store.redis_errors import NOT_ANSWERING, translate_redis_errors, unavailable
from bus.store.store import Store
from bus.trust.access import Access
from bus.trust.tokens import SCOPE_READ, SCOPE_WRITE, Authenticator, Claims

from .core import faults
from .delivery import lock_handoff
from .services import door, id_owner, items, send_many, typed_requests, watch
from .store import server_memory
from .telemetry import liveness
from .trust import tokens

if TYPE_CHECKING:
    from bus.telemetry.metrics import Metrics

__all__ = ["Bus", "check_host", "connect", "redis_client"]


@translate_redis_errors
class Bus:
    """One connection to the bus: sessions, sends, local delivery and the floor."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        client: redis.Redis | None = None,
        dispatcher: Dispatcher | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.settings = settings or Settings.from_env()
        self.clock = clock or SYSTEM
        self._client = client
        self._store: Store | None = None
        self._dispatcher = dispatcher
        self._metrics: Metrics | None = None
        self._blocking: Any = None
        # The composition root: each service gets what it uses, never the Bus. Store,
        # metrics, blocking client and dispatcher are providers: made on first use, so a
        # drain or a hook that never reaches Redis (or Celery) never connects.
        store, s, clk = (lambda: self.store), self.settings, self.clock
        self.auth = Authenticator(
            s.secret, is_revoked=self.is_revoked, is_current=self.token_current
        )
        self.floor = Floor(s.home, clock=clk)
        self.receipts = Receipts(store, s, self.claims)
        self.inbox = Inbox(
            store,
            self.floor,
            s,
            receipts=self.receipts,
            metrics=lambda: self.metrics,
            blocking=lambda: self.blocking,
            clock=clk,
        )
        self.router = Router(
            store,
            self.floor,
            s,
            receipts=self.receipts,
            inbox=self.inbox,
            dispatcher=lambda: self.dispatcher,
            verified=self.auth.enabled,
            clock=clk,
        )
        self.sessions = Sessions(
            store, self.floor, s, inbox=self.inbox, router=self.router, clock=clk
        )
        self.access = Access(
            self.auth,
            s,
            session=self.sessions.get,
            member_status=lambda ws, name: self.store.member_status(ws, name),
            clock=clk,
        )
        self.batches = BatchSender(
            store,
            s,
            receipts=self.receipts,
            dispatcher=lambda: self.dispatcher,
            claims=self.access.claims,
            settle=self.access.settle,
            resolve=self.sessions.resolve,
            floor_listening=self.router.floor_listening,
            verified=self.auth.enabled,
            clock=clk,
        )
        self.conversation = Conversation(
            store,
            self.router,
            self.receipts,
            session=self.sessions.get,
            blocking=lambda: self.blocking,
            clock=clk,
        )

    def with_settings(self, settings: Settings) -> Bus:
        """A bus with other settings on the same connection (store, dispatcher, clock):
        the services are composed again, since each holds the settings it was given."""
        other = Bus(settings, client=self._client, dispatcher=self._dispatcher, clock=self.clock)
        other._store, other._metrics, other._blocking = self._store, self._metrics, self._blocking
        return other

    @property
    def store(self) -> Store:
        """The Redis store, connected on first use (local delivery never needs it)."""
        if self._store is None:
            try:
                client = self._client or redis_client(self.settings)
            except NOT_ANSWERING as exc:  # a cluster client connects as it is made
                raise unavailable(exc) from exc
            self._store = Store(
                client,
                Keys(self.settings.key_prefix),
                lock_ttl_ms=int(self.settings.lock_ttl_s * 1000),
            )
        return self._store

    @property
    def dispatcher(self) -> Dispatcher:
        """How deliveries are asked for; the default (Celery) is imported on first use,
        so a drain or a hook that dispatches nothing never pays for it."""
        if self._dispatcher is None:
            self._dispatcher = default_dispatcher()
        if self.settings.kick == "list" and not isinstance(self._dispatcher, ListDispatcher):
            # The host's kick list first, this dispatcher when no loop of it is alive.
            self._dispatcher = ListDispatcher(lambda: self.store, self._dispatcher)
        return self._dispatcher

    @dispatcher.setter
    def dispatcher(self, value: Dispatcher) -> None:
        self._dispatcher = value

    @property
    def blocking(self) -> Any:
        """The store's server on a client without a read timeout, for BLPOP and XREAD BLOCK:
        the command's own bound holds the wait (see bus.store.blocking)."""
        if self._blocking is None:
            self._blocking = self.store.blocking_client()
        return self._blocking

    @property
    def metrics(self) -> Metrics:
        """Counters shared by every process through Redis (``/metrics`` reads them)."""
        if self._metrics is None:
            from bus.telemetry.metrics import (
                Metrics,  # prometheus_client: not for a drain or a hook
            )

            self._metrics = Metrics(self.store)
        return self._metrics

    def is_revoked(self, jti: str) -> bool:
        return self.store.is_revoked(jti)

    def token_current(self, claims: Claims) -> bool:
        """Whether a member token is of its member's current generation (removing a
        member kills every token issued before); other tokens always are."""
        if claims.sub_kind != "member":
            return True
        workspace, _, name = claims.sub.partition("/")
        try:
            return claims.gen >= self.store.member_generation(workspace, name)
        except (BadInput, ValueError):
            return False

    def issue_token(
        self,
        *,
        session: str | None = None,
        member: str | None = None,
        scopes: Sequence[str],
        ttl_s: int | None = None,
        operator: str | None = None,
    ) -> dict[str, Any]:
        """A signed token for a session, a member or an operator (``INBOX_SECRET`` must be set)."""
        if not self.settings.secret:
            raise BadInput("no INBOX_SECRET is configured: tokens need a server secret")
        gen = 0
        if member is not None and isinstance(member, str) and member.count("/") == 1:
            workspace, _, name = member.partition("/")
            with contextlib.suppress(BadInput, ValueError):  # auth.issue refuses a bad name
                gen = self.store.member_generation(workspace, name)
        token = tokens.issue(
            self.settings.secret,
            session=session,
            member=member,
            scopes=list(scopes),
            ttl_s=ttl_s,
            operator=operator,
            gen=gen,
        )
        claims = tokens.verify(self.settings.secret, token)
        return {
            "ok": True,
            "token": token,
            "subject": claims.actor,
            "jti": claims.jti,
            "scopes": sorted(claims.scopes),
            "exp": claims.exp,
        }

    def revoke_token(self, token: str) -> dict[str, Any]:
        """Revoke a token: every later use is refused (``token_revoked``)."""
        if not self.settings.secret:
            raise BadInput("no INBOX_SECRET is configured: there are no tokens to revoke")
        claims = tokens.verify(self.settings.secret, token, now=0)
        self.store.revoke(claims.jti)
        return {"ok": True, "revoked": claims.jti, "subject": claims.actor}

    # -- sessions ---------------------------------------------------------------------

    def open_session(
        self,
        sid: str,
        *,
        handle: str | None = None,
        host: str | None = None,
        parent: str | None = None,
        wake_cmd: str | None = None,
        workspace: str | None = None,
        starter: str | None = None,
        agent_inbox: bool | None = None,
        token: str | None = None,
    ) -> dict[str, Any]:
        """Register a session (or re-register it after a harness restart). Its workspace
        is fixed once set: only an operator's token may move it to another. With
        ``INBOX_SECRET`` set, joining a workspace takes the token of its starter (an active
        member of it) or an operator's."""
        check_session_id(sid)
        claims = self.access.only_as(sid, token, operator_ok=True, member_ok=True)
        return self.sessions.open(
            sid,
            handle=handle,
            host=host,
            parent=parent,
            wake_cmd=wake_cmd,
            workspace=workspace,
            starter=starter,
            agent_inbox=agent_inbox,
            opener=None if claims is None else (claims.sub_kind, claims.sub),
            auth=self.access.auth.enabled,
        )

    def seen(self, sid: str) -> None:
        """The harness of ``sid`` is alive now (``last_seen``, ms): open, turn, drain."""
        self.sessions.seen(sid)

    def session(self, sid: str) -> SessionInfo:
        return self.sessions.get(sid)

    def close_session(self, sid: str, *, token: str | None = None) -> dict[str, Any]:
        """Close a session: later messages are delivered raw; its threads stay readable."""
        self.access.only_as(sid, token)
        return self.sessions.close(sid)

    def turn(
        self,
        sid: str,
        event: str,
        *,
        answer: str | None = None,
        prompt_waiting: bool = False,
        token: str | None = None,
    ) -> dict[str, Any]:
        """Record a turn boundary from the harness (``start`` or ``end``)."""
        self.access.only_as(sid, token)
        return self.sessions.turn(sid, event, answer=answer, prompt_waiting=prompt_waiting)

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
    ) -> dict[str, Any]:
        """Validate, store and route one message; returns the send answer.

        With ``INBOX_SECRET`` set the sender comes from the token (``INBOX_TOKEN`` or
        ``token``), never from the body: a ``from`` or ``from_session`` naming someone else
        is refused. Without a secret the message is marked unverified.
        """
        data = fields.wire() if isinstance(fields, Message) else dict(fields)
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
        return self.post(msg, wait=wait, timeout=timeout)

    def _check_party(self, msg: Message) -> None:
        """Naming an existing thread needs the sender and the receiver to be its parties:
        the owner fixed them, and a computed thread id is no invitation."""
        if not msg.thread:
            return
        parties = self.conversation.parties(msg.thread)
        exists = parties or self.store.thread_exists(msg.thread)
        refusal = send_many.party_refusal(msg, parties, bool(exists))  # one rule for a batch too
        if refusal is not None:
            raise refusal

    def limit_sender(self, sender: str) -> None:
        """Bounded floods: one token from the sender's bucket, or ``rate_limited``."""
        s = self.settings
        if s.send_rate <= 0:
            return
        if not self.store.take_send_token(sender, s.send_rate, s.send_burst):
            raise RateLimited(
                f"{sender} is sending faster than {s.send_rate:g}/s (burst {s.send_burst:g});"
                " nothing was stored, try again shortly",
                code="rate_limited",
            )

    def claims(self, token: str | None, scope: str, *, session: str | None = None) -> Claims | None:
        """The caller's verified token claims, or None when authentication is off
        (see :meth:`bus.trust.access.Access.claims`)."""
        return self.access.claims(token, scope, session=session)

    def settle_sender(self, data: dict[str, Any], claims: Claims | None) -> dict[str, Any]:
        """A sent message's sender and time as stored (:meth:`bus.trust.access.Access.settle`)."""
        return self.access.settle(data, claims)

    def send_many(
        self, items: Sequence[dict[str, Any] | Message], *, token: str | None = None
    ) -> list[dict[str, Any]]:
        """Send a batch: validated whole (one bad item refuses it all, nothing written),
        each receiver looked up once, one pipelined append and one delivery per receiver.
        Answers as ``send`` would, one per item, in order. See :mod:`bus.services.send_many`."""
        return self.batches.send_many(items, token=token)

    def send_local(self, data: dict[str, Any], *, token: str | None = None) -> tuple[Via, str]:
        """prox's ``POST /send``: deliver on this host, ``(via, id)`` (see :mod:`bus.services.door`)."""
        return door.send_local(self, data, token)

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

    # -- typed requests and items --------------------------------

    def request(
        self,
        to_id: str,
        type: str,
        text: str,
        *,
        actor: str | None = None,
        windows: list[dict[str, Any]] | None = None,
        token: str | None = None,
    ) -> dict[str, Any]:
        """Open a typed request thread (``REQUESTED``) from ``actor`` to ``to_id``; it
        spends from the actor's send bucket."""
        sid = self.access.actor(actor, token)
        self.limit_sender(self.access.bucket_of(sid))
        return typed_requests.open_request(
            self,
            actor=sid,
            to_id=to_id,
            type=type,
            text=text,
            windows=windows,
        )

    def decide(
        self,
        thread: str,
        decision: str,
        *,
        actor: str | None = None,
        message: str | None = None,
        windows: list[dict[str, Any]] | None = None,
        token: str | None = None,
    ) -> dict[str, Any]:
        """Act on a typed thread; answers ``{ok, envelope_id, new_state}`` or raises Refused.

        The actor is the token's subject when authentication is on, never a body field.
        """
        return typed_requests.decide(
            self,
            thread,
            decision,
            actor=self.access.actor(actor, token),
            message=message,
            windows=windows,
        )

    def member_add(self, workspace: str, name: str) -> dict[str, Any]:
        return items.member_add(self, workspace, name)

    def member_remove(self, workspace: str, name: str) -> dict[str, Any]:
        """The member's account is gone; their messages show as "a former member"."""
        return items.member_remove(self, workspace, name)

    def item_post(
        self,
        sid: str,
        key: str,
        *,
        title: str,
        text: str | None = None,
        token: str | None = None,
    ) -> dict[str, Any]:
        """Post (or re-post: a new revision) an item for the members of ``sid``'s workspace;
        it spends from the session's send bucket."""
        claims = self.claims(token, SCOPE_WRITE, session=sid)
        self.limit_sender(claims.actor if claims else sid)
        return items.item_post(self, sid, key, title=title, text=text)

    def item_settle(
        self, sid: str, key: str, *, member: str, answer: str, token: str | None = None
    ) -> dict[str, Any]:
        """A member settles an item with an answer."""
        self.access.as_member(token, sid, member)
        return items.item_settle(self, sid, key, member=member, answer=answer)

    def item_write(
        self,
        sid: str,
        key: str,
        *,
        member: str,
        text: str | None = None,
        image_paths: Sequence[str] = (),
        root: Path | None = None,
        token: str | None = None,
    ) -> dict[str, Any]:
        """A member writes on an item; it reaches the agent as a notice and wakes it. It
        spends from the member's send bucket."""
        self.limit_sender(self.access.as_member(token, sid, member))
        return items.item_write(
            self, sid, key, member=member, text=text, image_paths=image_paths, root=root
        )

    def read_inbox(self, sid: str, *, token: str | None = None) -> dict[str, Any]:
        """Luke's ``read_inbox``: every item with its thread, oldest first."""
        self.access.items_claims(token, SCOPE_READ, sid)
        return items.read_inbox(self, sid)

    def reply_inbox(
        self,
        sid: str,
        key: str,
        *,
        text: str | None = None,
        image_paths: Sequence[str] = (),
        root: Path | None = None,
        token: str | None = None,
    ) -> dict[str, Any]:
        """Luke's ``reply_inbox``: words and/or up to 4 pictures on one of the agent's items
        (the session's own answer: no send bucket; its pictures count against the
        session's ``INBOX_MAX_PICTURE_BYTES``)."""
        self.claims(token, SCOPE_WRITE, session=sid)
        return items.reply_inbox(self, sid, key, text=text, image_paths=image_paths, root=root)

    def item_file(self, sid: str, key: str, name: str) -> Path:
        return items.item_file(self, sid, key, name)

    def workspace_items(self, workspace: str) -> dict[str, Any]:
        """Every item of the workspace's sessions, open first, newest first (the web inbox)."""
        return items.workspace_items(self, workspace)

    def item_detail(self, sid: str, key: str) -> dict[str, Any]:
        """One item with its whole thread (the web inbox's item page)."""
        return items.item_detail(self, sid, key)

    def member_link(self, member: str, *, ttl_s: int | None = None) -> dict[str, Any]:
        """A sign-in link to the web inbox for an active member ``WORKSPACE/NAME``."""
        from bus.services.signin_links import member_link

        return member_link(self, member, ttl_s=ttl_s)

    def subscribe(
        self, sessions: str | list[str] | None = None, **kw: Any
    ) -> Iterator[dict[str, Any]]:
        """Follow sessions' streams live (blocking XREAD); None follows all. See bus.services.watch."""
        return watch.subscribe(self, [sessions] if isinstance(sessions, str) else sessions, **kw)

    # -- the host's side ----------------------------------------------------------------

    def deliver_session(self, sid: str) -> DeliveryReport:
        """The worker's job: deliver what is queued for ``sid`` on this host; ``busy`` when
        a delivery already running for it takes the work over (:mod:`bus.delivery.lock_handoff`)."""
        check_session_id(sid)
        return lock_handoff.deliver(self, sid)

    def deliver_local(
        self, sid: str, *, sender: str, text: str, urgency: str = "queue", msg_id: str | None = None
    ) -> dict[str, Any]:
        """prox's ``deliver``: local precedence only, no Redis needed."""
        fields: dict[str, Any] = {
            "from": sender,
            "to_id": sid,
            "text": text,
            "urgency": urgency,
            "verified": False,  # nothing authenticates a local drop
        }
        if msg_id:
            fields["id"] = msg_id
        msg = parse_message(fields)
        via, path = self.floor.deliver(sid, msg.wire())
        return DeliverAnswer(via=via, id=msg.id, path=str(path)).model_dump()

    def peek(self, sid: str, *, stamped: bool = False) -> list[dict[str, Any]] | str:
        lines = self.floor.peek(check_session_id(sid))
        return self.render(lines) if stamped else lines

    def drain(self, sid: str, *, stamped: bool = False) -> list[dict[str, Any]] | str:
        """Claim the floor; notices drained here are marked noticed (now or when Redis is back)."""
        result = self.floor.drain(check_session_id(sid))
        faults.point("drain:after_unlink")
        self.inbox.on_drain(sid, result.lines)
        with contextlib.suppress(redis.RedisError):
            self.seen(sid)  # the drain works without Redis; presence is best effort
        return self.render(result.lines) if stamped else result.lines

    def render(self, lines: list[dict[str, Any]]) -> str:
        return self.inbox.render(lines)

    def status(self) -> dict[str, Any]:
        sessions = []
        for s in self.store.sessions():
            row = s.model_dump(exclude_none=True)
            row["backlog"] = self.store.backlog(s.session)
            sessions.append(row)
        return {
            "ok": True,
            "host": self.settings.host,
            "store": _redact(self.settings.store_url()),
            "home": str(self.settings.home),
            "sessions": sessions,
            # Each host's worker (and the scheduler): heartbeat ages and queue depth.
            "workers": liveness.workers(self.store),
            # The server memory settings the scheduler keeps, and where it could not.
            "memory_settings": server_memory.report(self.store),
        }


def _redact(url: str) -> str:
    from bus.core.hook_env import redact

    return redact(url)


def connect(
    settings: Settings | None = None,
    *,
    dispatcher: Dispatcher | None = None,
    client: redis.Redis | None = None,
) -> Bus:
    """A :class:`Bus` with settings from the environment (or the ones given)."""
    return Bus(settings, client=client, dispatcher=dispatcher)
