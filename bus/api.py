"""The Python API: ``from bus import connect; b = connect()``.

One :class:`Bus` per connection. Every surface (CLI, MCP server, HTTP gateway, Celery
tasks) parses its input and makes one call here.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from . import auth, faults, handoff, ingest, items, liveness, watch
from . import requests as typed_requests
from . import threads as threadkeys
from .auth import SCOPE_READ, SCOPE_THREAD, SCOPE_WRITE, Authenticator, Claims
from .cluster import cluster_client
from .conversation import Conversation
from .delivery import DeliveryReport
from .dispatch import Dispatcher, default_dispatcher
from .errors import Ambiguous, BadInput, NotFound, RateLimited, Refused, Unauthorized
from .floor import Floor
from .inbox import Inbox
from .keys import Keys
from .models import (
    DeliverAnswer,
    Message,
    Recipient,
    SendAnswer,
    SessionInfo,
    check_session_id,
    now_ms,
    parse_message,
)
from .receipts import Receipts, recipient_state
from .settings import Settings
from .store import Store
from .unavailable import NOT_ANSWERING, translate_redis_errors, unavailable

if TYPE_CHECKING:
    from .metrics import Metrics
from .trust import handle_problem


def check_host(host: str) -> str:
    check_session_id(host, "host name")
    return host


def redis_client(settings: Settings) -> Any:
    """A client for the bus store: ``INBOX_REDIS_URL`` or the embedded server's socket;
    a :class:`~redis.cluster.RedisCluster` with ``INBOX_REDIS_CLUSTER=1``."""
    if settings.redis_cluster:
        return cluster_client(settings.store_url())
    return redis.Redis.from_url(
        settings.store_url(),
        decode_responses=True,
        socket_connect_timeout=5,
        health_check_interval=30,
        # A restarted Redis leaves dead pooled connections: retry on a fresh one, briefly.
        retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), 4),
        retry_on_error=[redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError],
    )


@translate_redis_errors
class Bus:
    """One connection to the bus: sessions, sends, local delivery and the floor."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        client: redis.Redis | None = None,
        dispatcher: Dispatcher | None = None,
    ) -> None:
        self.settings = settings or Settings.from_env()
        self._client = client
        self._store: Store | None = None
        self._dispatcher = dispatcher
        self.floor = Floor(self.settings.home)
        self.inbox = Inbox(self)
        self.conversation = Conversation(self.inbox)
        self.receipts = Receipts(self)
        self.auth = Authenticator(self.settings.secret, is_revoked=self.is_revoked)
        self._metrics: Metrics | None = None
        self._blocking: Any = None

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
        return self._dispatcher

    @dispatcher.setter
    def dispatcher(self, value: Dispatcher) -> None:
        self._dispatcher = value

    @property
    def blocking(self) -> Any:
        """The store's server on a client without a read timeout, for BLPOP and XREAD BLOCK:
        the command's own bound holds the wait (see bus.blocking)."""
        if self._blocking is None:
            from .blocking import blocking_client

            self._blocking = blocking_client(self.store.r)
        return self._blocking

    @property
    def metrics(self) -> Metrics:
        """Counters shared by every process through Redis (``/metrics`` reads them)."""
        if self._metrics is None:
            from .metrics import Metrics  # prometheus_client: not for a drain or a hook

            self._metrics = Metrics(self.store.r, self.store.k)
        return self._metrics

    def is_revoked(self, jti: str) -> bool:
        return bool(self.store.r.sismember(self.store.k.revoked, jti))

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
        token = auth.issue(
            self.settings.secret,
            session=session,
            member=member,
            scopes=list(scopes),
            ttl_s=ttl_s,
            operator=operator,
        )
        claims = auth.verify(self.settings.secret, token)
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
        claims = auth.verify(self.settings.secret, token, now=0)
        self.store.r.sadd(self.store.k.revoked, claims.jti)
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
        """Register a session (or re-register it after a harness restart)."""
        check_session_id(sid)
        self._only_as(sid, token)
        host = check_host(host or self.settings.host)
        handle = handle or f"{host}:{sid}"
        if ":" not in handle or any(c.isspace() for c in handle):
            raise BadInput(f"handle {handle!r} must look like host:name")
        problem = handle_problem(handle)
        if problem:
            raise BadInput(f"handle {handle!r}: {problem}", code="handle_confusable")
        self._check_handle_free(sid, handle)
        prior = self.store.get_session(sid)
        info = SessionInfo(
            session=sid,
            handle=handle,
            host=host,
            state="idle",
            parent=parent,
            delegator=prior.delegator if prior else None,
            turns=prior.turns if prior else 0,
            wake_cmd=wake_cmd,
            workspace=workspace,
            starter=starter,
            agent_inbox=agent_inbox,
            opened_at=prior.opened_at if prior else now_ms(),
            updated_at=now_ms(),
            last_seen=now_ms(),
        )
        self.store.put_session(info)
        self.seen(sid)
        self.store.record(sid, "session_open", handle=handle, host=host)
        self.floor.session_dir(sid, create=host == self.settings.host)
        return {"ok": True, "session": info.model_dump(exclude_none=True)}

    def _check_handle_free(self, sid: str, handle: str) -> None:
        """A handle belongs to one open session: another open, fresh holder refuses it.

        A holder is stale when its harness has not been seen (open, turn, drain) for
        ``INBOX_STALE_S``; a closed or stale holder's handle may be taken.
        """
        now = now_ms()
        for other in self.store.sessions_by_handle(handle):
            if other.session == sid or other.state == "closed":
                continue
            seen = self.store.r.hget(self.store.k.s(other.session, "session"), "last_seen")
            last = int(seen) if seen else other.updated_at
            if now - last <= self.settings.stale_s * 1000:
                raise Refused(
                    f"handle {handle!r} is held by open session {other.session}",
                    code="handle_taken",
                    holder=other.session,
                )

    def _only_as(self, sid: str, token: str | None) -> None:
        """The harness's own events (open, close, turn) need no token, but one that is
        presented must be ``sid``'s own session token: a member token, or another
        session's, never acts as ``sid``."""
        token = token or self.settings.token
        if not self.auth.enabled or not token:
            return
        claims = auth.verify(self.settings.secret or "", token, is_revoked=self.is_revoked)
        if claims.sub_kind != "session" or claims.sub != sid:
            raise Unauthorized(
                f"the token is {claims.actor}'s, not session {sid}'s", code="token_subject"
            )

    def seen(self, sid: str) -> None:
        """The harness of ``sid`` is alive now (``last_seen``, ms): open, turn, drain."""
        key = self.store.k.s(sid, "session")
        if self.store.r.exists(key):  # never make a record for an unknown session
            self.store.r.hset(key, "last_seen", str(now_ms()))

    def session(self, sid: str) -> SessionInfo:
        info = self.store.get_session(check_session_id(sid))
        if info is None:
            raise NotFound(f"no session {sid!r}; open it with: inbox session open {sid}")
        return info

    def close_session(self, sid: str, *, token: str | None = None) -> dict[str, Any]:
        """Close a session: later messages are delivered raw; its threads stay readable."""
        self._only_as(sid, token)
        info = self.session(sid)
        self.store.update_session(sid, state="closing")
        self.inbox.on_close(sid)
        self.store.update_session(sid, state="closed")
        self.store.record(sid, "session_close")
        self._kick(info.host, sid)
        return {"ok": True, "session": sid, "state": "closed"}

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
        self._only_as(sid, token)
        info = self.session(sid)
        self.seen(sid)
        if event == "start":
            turns = self.store.incr_turns(sid)
            self.store.update_session(
                sid, state="running", prompt_waiting=prompt_waiting, last_seen=now_ms()
            )
            self.store.record(sid, "turn_start", turn=turns)
        elif event == "end":
            turns = info.turns
            self.store.update_session(sid, state="idle", prompt_waiting=False, last_seen=now_ms())
            self.store.record(sid, "turn_end", turn=turns, answer=answer or "")
        else:
            raise BadInput(f"turn event must be start or end, not {event!r}")
        result: dict[str, Any] = {"ok": True, "session": sid, "event": event, "turns": turns}
        result.update(self.inbox.on_turn(sid, event, answer))
        self._kick(info.host, sid)
        return result

    def _kick(self, host: str, sid: str) -> None:
        if self.store.mark_pending(sid):
            self.dispatcher.deliver(host, sid)

    # -- sending ----------------------------------------------------------------------

    def resolve(self, handle: str) -> SessionInfo:
        """The one live session with ``handle``; an error listing candidates otherwise."""
        try:
            found = [s for s in self.store.sessions_by_handle(handle) if s.state != "closed"]
        except ValueError as exc:  # a handle no key may be built from
            raise BadInput(f"invalid handle {handle!r:.80}") from exc
        if not found:
            raise NotFound(f"no live session has the handle {handle!r}")
        if len(found) > 1:
            now = now_ms()
            cands = [
                {"session": s.session, "state": s.state, "age_s": round((now - s.opened_at) / 1000)}
                for s in found
            ]
            listing = ", ".join(f"{c['session']} ({c['state']}, {c['age_s']}s)" for c in cands)
            raise Ambiguous(
                f"handle {handle!r} names {len(found)} live sessions: {listing}", candidates=cands
            )
        return found[0]

    def send(
        self,
        fields: dict[str, Any] | Message,
        *,
        wait: bool = False,
        timeout: float | None = None,
        token: str | None = None,
    ) -> dict[str, Any]:
        """Validate, store and route one message; answers SPEC section 4's JSON.

        With ``INBOX_SECRET`` set the sender comes from the token (``INBOX_TOKEN`` or
        ``token``), never from the body: a ``from`` or ``from_session`` naming someone else
        is refused. Without a secret the message is marked unverified.
        """
        data = fields.wire() if isinstance(fields, Message) else dict(fields)
        if "to_id" not in data and data.get("to"):
            data["to_id"] = self.resolve(str(data["to"])).session
        claims = self.claims(token, SCOPE_WRITE)
        if claims is None:
            if self.settings.session and not data.get("from_session"):
                data["from_session"] = self.settings.session
            data["verified"] = False
        else:
            data = self._as_token_subject(data, claims)
        msg = parse_message(data)
        self._check_party(msg)
        self.limit_sender(claims.actor if claims else msg.from_session or msg.from_)
        return self.post(msg, wait=wait, timeout=timeout)

    def _check_party(self, msg: Message) -> None:
        """Naming an existing thread needs the sender and the receiver to be its parties:
        the owner fixed them, and a computed thread id is no invitation."""
        if not msg.thread:
            return
        parties = self.conversation.parties(msg.thread)
        exists = parties or self.store.r.exists(self.store.k.t(msg.thread, "meta"))
        refusal = ingest.party_refusal(msg, parties, bool(exists))  # one rule for a batch too
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

    def send_many(
        self, items: Sequence[dict[str, Any] | Message], *, token: str | None = None
    ) -> list[dict[str, Any]]:
        """Send a batch: validated whole (one bad item refuses it all, nothing written),
        each receiver looked up once, one pipelined append and one delivery per receiver.
        Answers as ``send`` would, one per item, in order. See :mod:`bus.ingest`."""
        return ingest.send_many(self, items, token=token)

    def as_sender(self, data: dict[str, Any], token: str | None) -> dict[str, Any]:
        """``data`` with its sender set from ``token`` (authentication on), or refused."""
        claims = self.claims(token, SCOPE_WRITE)
        if claims is None:
            return {**data, "verified": False}
        return self._as_token_subject(data, claims)

    def _as_token_subject(self, data: dict[str, Any], claims: Claims) -> dict[str, Any]:
        if claims.sub_kind == "session":
            handle, sender_sid = self.session(claims.sub).handle, claims.sub
        else:
            workspace, _, name = claims.sub.partition("/")
            if not self._member_active(workspace, name):
                raise Unauthorized(
                    f"{claims.actor} is not an active member of {workspace!r}",
                    code="member_inactive",
                )
            handle, sender_sid = f"{workspace}:{name}", None
        if data.get("from") not in (None, handle) or data.get("from_session") not in (
            None,
            sender_sid,
        ):
            raise Unauthorized(
                f"the message claims to be from {data.get('from')!r} but the token is "
                f"{claims.actor}'s",
                code="forged_from",
            )
        return {**data, "from": handle, "from_session": sender_sid, "verified": True}

    def claims(self, token: str | None, scope: str, *, session: str | None = None) -> Claims | None:
        """The caller's verified token claims, or None when authentication is off.

        With ``session``, the call acts as that session: only that session's token may
        (a member token never reads a session's threads or writes as it).
        """
        claims = self.auth.actor_for_write(token or self.settings.token, scope, session=session)
        if claims is not None and session is not None and claims.sub_kind != "session":
            raise Unauthorized(
                f"the token is {claims.actor}'s; a member token never acts as session {session}",
                code="token_subject",
            )
        return claims

    def _member_active(self, workspace: str, name: str) -> bool:
        try:
            return items.is_member(self, workspace, name)
        except BadInput:  # a member name no key may be built from is no member
            return False

    def _items_claims(self, token: str | None, scope: str, sid: str) -> Claims | None:
        """Items of ``sid`` may be read by its own token or by an active member of its
        workspace (a member token acts only on items, never as the session)."""
        claims = self.auth.actor_for_write(token or self.settings.token, scope, session=sid)
        if claims is None or claims.sub_kind == "session":
            return claims
        workspace, _, name = claims.sub.partition("/")
        if self.session(sid).workspace != workspace or not self._member_active(workspace, name):
            raise Unauthorized(
                f"{claims.actor} is not an active member of session {sid}'s workspace",
                code="token_subject",
            )
        return claims

    def post(
        self, msg: Message, *, wait: bool = False, timeout: float | None = None
    ) -> dict[str, Any]:
        """Store and route a message whose sender is already settled (the library's own
        replies, retractions, decisions and item messages go through here)."""
        if msg.verified is None:
            msg = msg.model_copy(update={"verified": self.auth.enabled})
        sid = msg.to_id
        info = self.store.get_session(sid)
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
        answer = SendAnswer(
            id=msg.id,
            thread=thread,
            state="stored",
            recipient=Recipient(
                session=sid,
                host=info.host,
                # A harness unseen for INBOX_STALE_S: stored, but nobody may hear it soon.
                state=recipient_state(
                    info.state, info.last_seen or info.opened_at, now_ms(), self.settings.stale_s
                ),
                listening=self.floor_listening(info),
                last_seen=info.last_seen or None,
            ),
        )
        if wait:
            self.inbox.register_waiter(sid, msg.id)
        try:
            new, first, dispatch = self.store.append(
                sid,
                msg.id,
                msg.line(),
                json.dumps(answer.to_json()),
                thread,
                also=lambda pipe: self.receipts.open(pipe, msg, sid, thread),
                max_held=self.settings.max_unread,
            )
        except RateLimited:  # inbox_full: what was not stored is not in the outbox either
            self.receipts.unlist_refused([(msg, sid)])
            raise
        if not new:
            prior = json.loads(first)
            prior["duplicate"] = True
            if wait and prior.get("state") == "stored":
                return self.inbox.wait_answer(sid, msg.id, prior, timeout)
            if wait:
                self.store.r.srem(self.store.k.s(sid, "waiters"), msg.id)
            return prior
        if dispatch:
            self.dispatcher.deliver(info.host, sid)
        if wait:
            return self.inbox.wait_answer(sid, msg.id, answer.to_json(), timeout)
        return answer.to_json()

    def thread_for(self, msg: Message) -> str:
        key = threadkeys.thread_key(
            thread=msg.thread, pr=msg.pr, topic=msg.topic, sender=msg.from_, text=msg.text
        )
        return threadkeys.thread_id(msg.to_id, key)

    def floor_listening(self, info: SessionInfo) -> bool:
        if info.host != self.settings.host:
            return False
        try:
            return self.floor.socket_path(info.session).exists()
        except BadInput:
            return False

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

    # -- typed requests and items (SPEC sections 7 and 8) --------------------------------

    def _actor(self, actor: str | None, token: str | None = None) -> str:
        """The acting session: the token's subject when authentication is on, else the one
        given, else INBOX_SESSION."""
        claims = self.claims(token, SCOPE_THREAD)
        if claims is not None:
            if claims.sub_kind != "session" or actor not in (None, claims.sub):
                raise Unauthorized(
                    f"the token is {claims.actor}'s, not {actor!r}'s", code="token_subject"
                )
            return claims.sub
        sid = actor or self.settings.session
        if not sid:
            raise BadInput("no acting session: set INBOX_SESSION to this session's id")
        return sid

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
        """Open a typed request thread (``REQUESTED``) from ``actor`` to ``to_id``."""
        return typed_requests.open_request(
            self,
            actor=self._actor(actor, token),
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
            actor=self._actor(actor, token),
            message=message,
            windows=windows,
        )

    def member_add(self, workspace: str, name: str) -> dict[str, Any]:
        return items.member_add(self, workspace, name)

    def member_remove(self, workspace: str, name: str) -> dict[str, Any]:
        """The member's account is gone; their messages show as "a former member"."""
        return items.member_remove(self, workspace, name)

    def _as_member(self, token: str | None, sid: str, member: str) -> None:
        """With authentication on, a member's write needs that member's own token."""
        claims = self.claims(token, SCOPE_WRITE)
        if claims is None:
            return
        expected = f"{self.session(sid).workspace}/{member}"
        workspace, _, name = expected.partition("/")
        if (
            claims.sub_kind != "member"
            or claims.sub != expected
            or not self._member_active(workspace, name)
        ):
            raise Unauthorized(
                f"the token is {claims.actor}'s, not member {expected}'s", code="token_subject"
            )

    def item_post(
        self,
        sid: str,
        key: str,
        *,
        title: str,
        text: str | None = None,
        token: str | None = None,
    ) -> dict[str, Any]:
        """Post (or re-post: a new revision) an item for the members of ``sid``'s workspace."""
        self.claims(token, SCOPE_WRITE, session=sid)
        return items.item_post(self, sid, key, title=title, text=text)

    def item_settle(
        self, sid: str, key: str, *, member: str, answer: str, token: str | None = None
    ) -> dict[str, Any]:
        """A member settles an item with an answer."""
        self._as_member(token, sid, member)
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
        """A member writes on an item; it reaches the agent as a notice and wakes it."""
        self._as_member(token, sid, member)
        return items.item_write(
            self, sid, key, member=member, text=text, image_paths=image_paths, root=root
        )

    def read_inbox(self, sid: str, *, token: str | None = None) -> dict[str, Any]:
        """Luke's ``read_inbox``: every item with its thread, oldest first."""
        self._items_claims(token, SCOPE_READ, sid)
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
        """Luke's ``reply_inbox``: words and/or up to 4 pictures on one of the agent's items."""
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
        from .web.links import member_link

        return member_link(self, member, ttl_s=ttl_s)

    def subscribe(
        self, sessions: str | list[str] | None = None, **kw: Any
    ) -> Iterator[dict[str, Any]]:
        """Follow sessions' streams live (blocking XREAD); None follows all. See bus.watch."""
        return watch.subscribe(self, [sessions] if isinstance(sessions, str) else sessions, **kw)

    # -- the host's side ----------------------------------------------------------------

    def deliver_session(self, sid: str) -> DeliveryReport:
        """The worker's job: deliver what is queued for ``sid`` on this host; ``busy`` when
        a delivery already running for it takes the work over (:mod:`bus.handoff`)."""
        check_session_id(sid)
        return handoff.deliver(self, sid)

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
        }


def _redact(url: str) -> str:
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://***@{rest.split('@', 1)[1]}"
    return url


def connect(
    settings: Settings | None = None,
    *,
    dispatcher: Dispatcher | None = None,
    client: redis.Redis | None = None,
) -> Bus:
    """A :class:`Bus` with settings from the environment (or the ones given)."""
    return Bus(settings, client=client, dispatcher=dispatcher)


__all__ = ["Bus", "connect"]
