"""The Python API: ``from bus import connect; b = connect()``.

One :class:`Bus` per connection. Every surface (CLI, MCP server, HTTP gateway, Celery
tasks) parses its input and makes one call here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import redis

from . import items
from . import requests as typed_requests
from . import threads as threadkeys
from .delivery import DeliveryReport, deliver_session
from .dispatch import Dispatcher, default_dispatcher
from .errors import Ambiguous, BadInput, NotFound
from .floor import Floor
from .inbox import Inbox
from .keys import Keys
from .metrics import Metrics
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
from .settings import Settings
from .store import Store

HOST_PATTERN_HINT = "host names use letters, digits, '.', '_' and '-'"


def check_host(host: str) -> str:
    check_session_id(host, "host name")
    return host


def redis_client(settings: Settings) -> redis.Redis:
    """A client for the bus store: ``INBOX_REDIS_URL`` or the embedded server's socket."""
    return redis.Redis.from_url(
        settings.store_url(),
        decode_responses=True,
        socket_connect_timeout=5,
        health_check_interval=30,
    )


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
        self.dispatcher = dispatcher if dispatcher is not None else default_dispatcher()
        self.floor = Floor(self.settings.home)
        self.inbox = Inbox(self)
        self._metrics: Metrics | None = None

    @property
    def store(self) -> Store:
        """The Redis store, connected on first use (local delivery never needs it)."""
        if self._store is None:
            client = self._client or redis_client(self.settings)
            self._store = Store(
                client,
                Keys(self.settings.key_prefix),
                lock_ttl_ms=int(self.settings.lock_ttl_s * 1000),
            )
        return self._store

    @property
    def metrics(self) -> Metrics:
        """Counters shared by every process through Redis (``/metrics`` reads them)."""
        if self._metrics is None:
            self._metrics = Metrics(self.store.r, self.store.k)
        return self._metrics

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
    ) -> dict[str, Any]:
        """Register a session (or re-register it after a harness restart)."""
        check_session_id(sid)
        host = check_host(host or self.settings.host)
        handle = handle or f"{host}:{sid}"
        if ":" not in handle or any(c.isspace() for c in handle):
            raise BadInput(f"handle {handle!r} must look like host:name")
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
        )
        self.store.put_session(info)
        self.store.record(sid, "session_open", handle=handle, host=host)
        self.floor.session_dir(sid, create=host == self.settings.host)
        return {"ok": True, "session": info.model_dump(exclude_none=True)}

    def session(self, sid: str) -> SessionInfo:
        info = self.store.get_session(check_session_id(sid))
        if info is None:
            raise NotFound(f"no session {sid!r}; open it with: inbox session open {sid}")
        return info

    def close_session(self, sid: str) -> dict[str, Any]:
        """Close a session: later messages are delivered raw; its threads stay readable."""
        info = self.session(sid)
        self.store.update_session(sid, state="closing")
        self.inbox.on_close(sid)
        self.store.update_session(sid, state="closed")
        self.store.record(sid, "session_close")
        self._kick(info.host, sid)
        return {"ok": True, "session": sid, "state": "closed"}

    def turn(
        self, sid: str, event: str, *, answer: str | None = None, prompt_waiting: bool = False
    ) -> dict[str, Any]:
        """Record a turn boundary from the harness (``start`` or ``end``)."""
        info = self.session(sid)
        if event == "start":
            turns = self.store.incr_turns(sid)
            self.store.update_session(sid, state="running", prompt_waiting=prompt_waiting)
            self.store.record(sid, "turn_start", turn=turns)
        elif event == "end":
            turns = info.turns
            self.store.update_session(sid, state="idle", prompt_waiting=False)
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
        found = [s for s in self.store.sessions_by_handle(handle) if s.state != "closed"]
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
        self, fields: dict[str, Any] | Message, *, wait: bool = False, timeout: float | None = None
    ) -> dict[str, Any]:
        """Validate, store and route one message; answers SPEC section 4's JSON."""
        if isinstance(fields, Message):
            msg = fields
        else:
            data = dict(fields)
            if "to_id" not in data and data.get("to"):
                data["to_id"] = self.resolve(str(data["to"])).session
            if self.settings.session and not data.get("from_session"):
                data["from_session"] = self.settings.session
            msg = parse_message(data)
        sid = msg.to_id
        info = self.store.get_session(sid)
        if info is None:
            return SendAnswer(
                ok=False,
                id=msg.id,
                state="bounced",
                recipient=Recipient(session=sid, state="unknown"),
                reason=f"no session {sid!r} is registered",
            ).to_json()
        thread = self.thread_for(msg)
        if msg.thread is None and msg.kind == "message":
            msg = msg.model_copy(update={"thread": thread})
        answer = SendAnswer(
            id=msg.id,
            thread=thread,
            state="stored",
            recipient=Recipient(
                session=sid, host=info.host, state=info.state, listening=self.floor_listening(info)
            ),
        )
        if wait:
            self.inbox.register_waiter(sid, msg.id)
        new, first, dispatch = self.store.append(
            sid, msg.id, msg.line(), json.dumps(answer.to_json())
        )
        if not new:
            prior = json.loads(first)
            prior["duplicate"] = True
            if wait and prior.get("state") == "stored":
                return self.inbox.wait_answer(sid, msg.id, prior, timeout)
            if wait:
                self.store.r.srem(self.store.k.s(sid, "waiters"), msg.id)
            return prior
        self.store.record(sid, "inbox_received", id=msg.id, thread=thread)
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

    def threads(self, sid: str) -> dict[str, Any]:
        """The session's threads, newest first."""
        self.session(sid)
        return {"ok": True, "session": sid, "threads": self.inbox.threads(sid)}

    def read(self, sid: str, thread: str, *, mark_read: bool = False) -> dict[str, Any]:
        """A whole thread, oldest first; ``mark_read`` marks the session's messages read."""
        return {"ok": True, **self.inbox.read(sid, thread, mark_read=mark_read)}

    def reply(self, sid: str, thread: str, text: str) -> dict[str, Any]:
        """Answer into the other parties' inboxes under ``thread``; never a turn for them."""
        return self.inbox.reply(sid, thread, text)

    def withdraw(self, msg_id: str, by: str) -> dict[str, Any]:
        """Unsend (before any notice) or retract (after) a message; only its sender may."""
        return self.inbox.withdraw(msg_id, by)

    # -- typed requests and items (SPEC sections 7 and 8) --------------------------------

    def _actor(self, actor: str | None) -> str:
        """The acting session: given, else INBOX_SESSION (or the token's subject)."""
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
    ) -> dict[str, Any]:
        """Open a typed request thread (``REQUESTED``) from ``actor`` to ``to_id``."""
        return typed_requests.open_request(
            self, actor=self._actor(actor), to_id=to_id, type=type, text=text, windows=windows
        )

    def decide(
        self,
        thread: str,
        decision: str,
        *,
        actor: str | None = None,
        message: str | None = None,
        windows: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Act on a typed thread; answers ``{ok, envelope_id, new_state}`` or raises Refused."""
        return typed_requests.decide(
            self, thread, decision, actor=self._actor(actor), message=message, windows=windows
        )

    def member_add(self, workspace: str, name: str) -> dict[str, Any]:
        return items.member_add(self, workspace, name)

    def member_remove(self, workspace: str, name: str) -> dict[str, Any]:
        """The member's account is gone; their messages show as "a former member"."""
        return items.member_remove(self, workspace, name)

    def item_post(
        self, sid: str, key: str, *, title: str, text: str | None = None
    ) -> dict[str, Any]:
        """Post (or re-post: a new revision) an item for the members of ``sid``'s workspace."""
        return items.item_post(self, sid, key, title=title, text=text)

    def item_settle(self, sid: str, key: str, *, member: str, answer: str) -> dict[str, Any]:
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
    ) -> dict[str, Any]:
        """A member writes on an item; it reaches the agent as a notice and wakes it."""
        return items.item_write(
            self, sid, key, member=member, text=text, image_paths=image_paths, root=root
        )

    def read_inbox(self, sid: str) -> dict[str, Any]:
        """Luke's ``read_inbox``: every item with its thread, oldest first."""
        return items.read_inbox(self, sid)

    def reply_inbox(
        self,
        sid: str,
        key: str,
        *,
        text: str | None = None,
        image_paths: Sequence[str] = (),
        root: Path | None = None,
    ) -> dict[str, Any]:
        """Luke's ``reply_inbox``: words and/or up to 4 pictures on one of the agent's items."""
        return items.reply_inbox(self, sid, key, text=text, image_paths=image_paths, root=root)

    def item_file(self, sid: str, key: str, name: str) -> Path:
        return items.item_file(self, sid, key, name)

    # -- the host's side ----------------------------------------------------------------

    def deliver_session(self, sid: str) -> DeliveryReport:
        """The worker's job: deliver what is queued for ``sid`` on this host."""
        check_session_id(sid)
        return deliver_session(self, sid)

    def deliver_local(
        self, sid: str, *, sender: str, text: str, urgency: str = "queue", msg_id: str | None = None
    ) -> dict[str, Any]:
        """prox's ``deliver``: local precedence only, no Redis needed."""
        fields: dict[str, Any] = {"from": sender, "to_id": sid, "text": text, "urgency": urgency}
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
        self.inbox.on_drain(sid, result.lines)
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
