"""Sessions: the harness's life cycle (open, turn, close), presence and handles.

The facade (:class:`bus.api.Bus`) checks who may act as the session and calls here; the
inbox hears each event (waiting senders answered, retries re-armed) and the router kicks
a delivery after it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bus.core.clock import SYSTEM, Clock
from bus.core.errors import Ambiguous, BadInput, NotFound, Refused, Unauthorized
from bus.core.models import SessionInfo, check_session_id
from bus.delivery import kept_wake
from bus.store.schedule import WAKE_TURN
from bus.trust.rules import (
    handle_fold_of,
    handle_problem,
    join_refusal,
    parent_refusal,
    reserved_handle,
    skeleton,
)

# A holder's handle is free once its harness is silent this long at the least, whatever
# INBOX_STALE_S the taker's environment says (a longer setting still counts).
MIN_HANDLE_STALE_S = 3600.0

if TYPE_CHECKING:
    from bus.core.settings import Settings
    from bus.delivery.floor import Floor
    from bus.delivery.inbox import Inbox
    from bus.store.store import Store

    from .routing import Router


def check_host(host: str) -> str:
    check_session_id(host, "host name")
    return host


def no_session(sid: str) -> NotFound:
    """The refusal for a session id with no record: it says how to open one."""
    return NotFound(f"no session {sid!r}; open it with: inbox session open {sid}")


class Sessions:
    """Session records on one store (a provider, called on use)."""

    def __init__(
        self,
        store: Callable[[], Store],
        floor: Floor,
        settings: Settings,
        *,
        inbox: Inbox,
        router: Router,
        opener: Callable[[str, str | None], tuple[str, str] | None] = lambda sid, token: None,
        auth: bool = False,
        clock: Clock = SYSTEM,
    ) -> None:
        self._store, self.floor, self.settings = store, floor, settings
        self.inbox, self.router, self.clock = inbox, router, clock
        # Who a token opens a session as (kind, subject), checked; whether tokens are.
        self.opener, self.auth = opener, auth

    @property
    def store(self) -> Store:
        return self._store()

    def open(
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
        wake_problem: str | None = None,
    ) -> dict[str, Any]:
        """Register a session (or re-register it after a harness restart). A re-open that
        names no handle keeps the session's, on the same host. Its workspace
        is fixed once set: re-registering without one keeps it, naming another is refused
        ``workspace_fixed`` unless an operator's token opens it. With ``INBOX_SECRET`` set,
        joining a workspace takes the token of its starter (an active member of it) or an
        operator's (:func:`bus.trust.rules.join_refusal`)."""
        check_session_id(sid)
        opener = self.opener(sid, token)
        host = check_host(host or self.settings.host)
        if handle is None:
            was = self.store.sessions.get_session(sid)
            handle = was.handle if was is not None and was.host == host else f"{host}:{sid}"
        if ":" not in handle or any(c.isspace() for c in handle):
            raise BadInput(f"handle {handle!r} must look like host:name")
        problem = handle_problem(handle)
        if problem:
            raise BadInput(f"handle {handle!r}: {problem}", code="handle_confusable")
        self.check_handle_reserved(handle)
        self.check_handle_free(sid, handle)
        skel = self.check_no_look_alike(sid, handle)
        prior = self.store.sessions.get_session(sid)
        exists = prior is not None
        if parent_refusal(
            prior.parent if prior else None, parent, opener, exists=exists, sid=sid, auth=self.auth
        ):
            raise Refused(
                f"session {sid} is open already; naming {parent!r} its parent (who then "
                "reads its whole inbox) takes the session's own token or an operator's",
                code="parent_fixed",
            )
        if prior is not None and prior.workspace and workspace in (None, prior.workspace):
            workspace, starter = prior.workspace, starter or prior.starter
        why = join_refusal(
            None if prior is None else (prior.workspace, prior.starter),
            (workspace, starter),
            opener,
            auth=self.auth,
        )
        if why == "workspace_fixed":
            assert prior is not None
            raise Refused(
                f"session {sid} belongs to workspace {prior.workspace!r}; moving it to "
                f"{workspace!r} needs an operator token",
                code=why,
            )
        if why == "token_subject":
            assert opener is not None
            raise Unauthorized(
                f"the token is {opener[0]}:{opener[1]}'s, not session {sid}'s", code=why
            )
        if why == "token_missing":
            raise Unauthorized(
                f"opening a session in workspace {workspace!r} needs a token: the token of "
                f"its starter, a member of {workspace!r}, or an operator's",
                code=why,
            )
        if why:
            who = f"{opener[0]}:{opener[1]}" if opener else "no token"
            raise Refused(
                f"{who} may not open a session in workspace {workspace!r} started by "
                f"{starter!r}: that takes the starter's own member token or an operator's",
                code=why,
            )
        now = self.clock.now_ms()
        info = SessionInfo(
            session=sid,
            handle=handle,
            host=host,
            state="idle",
            parent=parent,
            delegator=prior.delegator if prior else None,
            turns=prior.turns if prior else 0,
            wake_cmd=wake_cmd,
            wake_problem=None if wake_cmd else wake_problem,
            workspace=workspace,
            starter=starter,
            agent_inbox=agent_inbox,
            opened_at=prior.opened_at if prior else now,
            updated_at=now,
            last_seen=now,
        )
        if host == self.settings.host:
            # Its directory and an empty queue file for its notices; first, so a floor
            # folder refused (another user's, a link) leaves nothing registered.
            self.floor.prepare(sid)
            # The wake command the worker here runs: kept on this host, never read
            # back from Redis (bus.delivery.kept_wake).
            kept_wake.keep(self.floor, sid, wake_cmd)
        if skel != handle:  # found by its skeleton when a look-alike comes
            self.store.sessions.index_skeleton(skel, sid)
        self.store.sessions.put_session(info)
        self.seen(sid)
        self.store.events.record(sid, "session_open", handle=handle, host=host)
        return {"ok": True, "session": info.model_dump(exclude_none=True)}

    def check_handle_reserved(self, handle: str) -> None:
        """``operator:<name>`` is the web operator's, and ``<workspace>:<name>`` a
        member's (active or former): no session takes them (``reserved_handle``)."""
        why = reserved_handle(handle)
        if why is None:
            first, _, name = handle.partition(":")
            try:
                check_session_id(first, "workspace")
                check_session_id(name, "member name")
            except BadInput:
                return  # no workspace or member is named so
            if self.store.members.member_status(first, name) is not None:
                why = f"it is the name of member {first}/{name}"
        if why is None:
            # Case and look-alikes do not make another name: ACME:dean is acme:dean's.
            member = self.store.members.member_by_fold(handle_fold_of(handle))
            if member is not None:
                why = f"it reads as the name of member {member}"
        if why is not None:
            raise BadInput(f"handle {handle!r} is reserved: {why}", code="reserved_handle")

    def check_no_look_alike(self, sid: str, handle: str) -> str:
        """A handle whose confusable skeleton (Unicode TR39, bus.trust.rules.skeleton) is
        another open session's handle's is refused ``handle_lookalike``: a stamp from
        ``һ1:alice`` (Cyrillic ``һ``) would read exactly as one from ``h1:alice``.
        Answers the skeleton."""
        skel = skeleton(handle)
        try:
            holders = list(self.store.sessions.sessions_by_skeleton(skel))
            if skel != handle:
                holders += self.store.sessions.sessions_by_handle(skel)
        except ValueError:  # it reads as characters no handle holds ("{", "}")
            raise BadInput(
                f"handle {handle!r} reads as {skel!r}, which no handle may be",
                code="handle_confusable",
            ) from None
        for other in holders:
            if other.session == sid or other.state == "closed" or other.handle == handle:
                continue
            if skeleton(other.handle) == skel:
                raise BadInput(
                    f"handle {handle!r} reads as {other.handle!r}, the handle of open "
                    f"session {other.session}",
                    code="handle_lookalike",
                )
        return skel

    def check_handle_free(self, sid: str, handle: str) -> None:
        """A handle belongs to one open session: another open, fresh holder refuses it.

        A holder is stale when its harness has not been seen (open, turn, drain) for
        ``INBOX_STALE_S``, and never sooner than :data:`MIN_HANDLE_STALE_S` (the taker's
        environment cannot shorten it); a holder listening on its socket on this host is
        live. A closed or stale holder's handle may be taken.
        """
        now = self.clock.now_ms()
        stale_ms = max(self.settings.stale_s, MIN_HANDLE_STALE_S) * 1000
        for other in self.store.sessions.sessions_by_handle(handle):
            if other.session == sid or other.state == "closed":
                continue
            last = self.store.sessions.last_seen(other.session) or other.updated_at
            if now - last <= stale_ms or self.router.floor_listening(other):
                raise Refused(
                    f"handle {handle!r} is held by open session {other.session}",
                    code="handle_taken",
                    holder=other.session,
                )

    def seen(self, sid: str) -> None:
        """The harness of ``sid`` is alive now (``last_seen``, ms): open, turn, drain."""
        self.store.sessions.touch_seen(sid, self.clock.now_ms())

    def get(self, sid: str) -> SessionInfo:
        """The session's record, or :class:`NotFound` saying how to open it."""
        info = self.store.sessions.get_session(check_session_id(sid))
        if info is None:
            raise no_session(sid)
        return info

    def close(self, sid: str) -> dict[str, Any]:
        """Close a session: later messages are delivered raw; its threads stay readable."""
        info = self.get(sid)
        self.store.sessions.update_session(sid, state="closing")
        self.inbox.on_close(sid)
        self.store.sessions.update_session(sid, state="closed")
        self.store.events.record(sid, "session_close")
        self.router.kick(info.host, sid)
        return {"ok": True, "session": sid, "state": "closed"}

    def turn(
        self, sid: str, event: str, *, answer: str | None = None, prompt_waiting: bool = False
    ) -> dict[str, Any]:
        """Record a turn boundary from the harness (``start`` or ``end``)."""
        info = self.get(sid)
        self.seen(sid)
        now = self.clock.now_ms()
        if info.woken_at:  # the wake is heard (or over): its timeout entry goes
            self.store.schedule.unschedule(WAKE_TURN, sid)
        if event == "start":
            turns = self.store.sessions.incr_turns(sid)
            # The harness took the turn: its wake (if any) is heard (woken_at cleared).
            self.store.sessions.update_session(
                sid, state="running", prompt_waiting=prompt_waiting, last_seen=now, woken_at=None
            )
            self.store.events.record(sid, "turn_start", turn=turns)
        elif event == "end":
            turns = info.turns
            self.store.sessions.update_session(
                sid, state="idle", prompt_waiting=False, last_seen=now, woken_at=None
            )
            self.store.events.record(sid, "turn_end", turn=turns, answer=answer or "")
        else:
            raise BadInput(f"turn event must be start or end, not {event!r}")
        result: dict[str, Any] = {"ok": True, "session": sid, "event": event, "turns": turns}
        result.update(self.inbox.on_turn(sid, event, answer))
        self.router.kick(info.host, sid)
        return result

    def resolve(self, handle: str) -> SessionInfo:
        """The one live session with ``handle``; an error listing candidates otherwise."""
        try:
            found = [
                s for s in self.store.sessions.sessions_by_handle(handle) if s.state != "closed"
            ]
        except ValueError as exc:  # a handle no key may be built from
            raise BadInput(f"invalid handle {handle!r:.80}") from exc
        if not found:
            raise NotFound(f"no live session has the handle {handle!r}")
        if len(found) > 1:
            now = self.clock.now_ms()
            cands = [
                {"session": s.session, "state": s.state, "age_s": round((now - s.opened_at) / 1000)}
                for s in found
            ]
            listing = ", ".join(f"{c['session']} ({c['state']}, {c['age_s']}s)" for c in cands)
            raise Ambiguous(
                f"handle {handle!r} names {len(found)} live sessions: {listing}", candidates=cands
            )
        return found[0]
