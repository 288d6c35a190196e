"""Who may act: token claims checked at the facade (:class:`bus.api.Bus`).

Every public :class:`~bus.api.Bus` method that acts for a caller calls one check here
before it calls a service; the services trust what they are given.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bus.core.clock import SYSTEM, Clock
from bus.core.errors import BadInput, NotFound, Refused, Unauthorized
from bus.core.models import ACTIVE, RESERVED_WORKSPACES, SessionInfo, check_session_id

from .tokens import SCOPE_THREAD, SCOPE_WRITE, Authenticator, Claims

if TYPE_CHECKING:
    from bus.core.settings import Settings


class Access:
    """Token checks for one bus: its authenticator, settings, session and member lookups."""

    def __init__(
        self,
        auth: Authenticator,
        settings: Settings,
        *,
        session: Callable[[str], SessionInfo],
        member_status: Callable[[str, str], str | None],
        clock: Clock = SYSTEM,
    ) -> None:
        self.auth, self.settings, self.clock = auth, settings, clock
        self._session, self._member_status = session, member_status

    def only_as(
        self, sid: str, token: str | None, *, operator_ok: bool = False, member_ok: bool = False
    ) -> Claims | None:
        """The harness's own events (open, close, turn) need no token, but one that is
        presented must be ``sid``'s own session token (or, with ``operator_ok``, an
        operator's; with ``member_ok``, an active member's, for opening a session the
        member starts): a member token, or another session's, never acts as ``sid``."""
        token = token or self.settings.token
        if not self.auth.enabled or not token:
            return None
        claims = self.auth.verify(token)
        if operator_ok and claims.sub_kind == "operator":
            return claims
        if member_ok and claims.sub_kind == "member":
            workspace, _, name = claims.sub.partition("/")
            if not self.member_active(workspace, name):
                raise Unauthorized(
                    f"{claims.actor} is not an active member", code="member_inactive"
                )
            return claims
        if claims.sub_kind != "session" or claims.sub != sid:
            raise Unauthorized(
                f"the token is {claims.actor}'s, not session {sid}'s", code="token_subject"
            )
        return claims

    def settle(self, data: dict[str, Any], claims: Claims | None) -> dict[str, Any]:
        """A sent message's fields as the bus stores them, whatever the surface: a kind
        the bus writes itself refused (``kind_reserved``); its sender from the token (:meth:`as_token_subject`), else marked unverified (and
        from ``INBOX_SESSION`` when set); its ``ts`` the server's time, never the
        sender's (the bus's clock)."""
        kind = data.get("kind")
        if kind not in (None, "message"):
            raise BadInput(
                f"kind {str(kind)[:40]!r} is the bus's own (it writes notices, replies, "
                "retractions, decisions and item messages itself); a sender's message is "
                "kind 'message' or names none",
                code="kind_reserved",
            )
        if claims is None:
            data = {**data, "verified": False}
            if self.settings.session and not data.get("from_session"):
                data["from_session"] = self.settings.session
        else:
            data = self.as_token_subject(data, claims)
        data["ts"] = self.clock.now_ms()
        return data

    def as_token_subject(self, data: dict[str, Any], claims: Claims) -> dict[str, Any]:
        """``data`` with its sender set to the token's subject; a forged sender refused,
        and a member's message to a session outside the member's workspace refused."""
        if claims.sub_kind == "session":
            handle, sender_sid = self._session(claims.sub).handle, claims.sub
        else:
            workspace, _, name = claims.sub.partition("/")
            if not self.member_active(workspace, name):
                raise Unauthorized(
                    f"{claims.actor} is not an active member of {workspace!r}",
                    code="member_inactive",
                )
            self._own_workspace(workspace, claims, data.get("to_id"))
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

    def _own_workspace(self, workspace: str, claims: Claims, to: object) -> None:
        """A member sends only to sessions of its own workspace: an unknown session gets
        the same answer as another workspace's (no existence oracle)."""
        if not isinstance(to, str):
            return  # no receiver: the message itself is refused when it is parsed
        try:
            found = self._session(to).workspace
        except NotFound:
            found = None
        if found != workspace:
            raise Refused(
                f"{claims.actor} may send only to sessions of workspace {workspace!r}",
                code="not_your_workspace",
            )

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

    def member_active(self, workspace: str, name: str) -> bool:
        """Whether ``WORKSPACE/NAME`` is an active member (an invalid name is none)."""
        if workspace in RESERVED_WORKSPACES:
            return False
        try:
            check_session_id(name, "member name")
            return self._member_status(check_session_id(workspace, "workspace"), name) == ACTIVE
        except BadInput:  # a member name no key may be built from is no member
            return False

    def items_claims(self, token: str | None, scope: str, sid: str) -> Claims | None:
        """Items of ``sid`` may be read by its own token or by an active member of its
        workspace (a member token acts only on items, never as the session)."""
        claims = self.auth.actor_for_write(token or self.settings.token, scope, session=sid)
        if claims is None or claims.sub_kind == "session":
            return claims
        workspace, _, name = claims.sub.partition("/")
        if self._session(sid).workspace != workspace or not self.member_active(workspace, name):
            raise Unauthorized(
                f"{claims.actor} is not an active member of session {sid}'s workspace",
                code="token_subject",
            )
        return claims

    def bucket_of(self, sid: str) -> str:
        """Session ``sid``'s rate bucket as its sends name it: the token subject
        ``session:<sid>`` when authentication is on, else the session id."""
        return f"session:{sid}" if self.auth.enabled else sid

    def actor(self, actor: str | None, token: str | None = None) -> str:
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

    def as_member(self, token: str | None, sid: str, member: str) -> str:
        """With authentication on, a member's write needs that member's own token.
        Answers the writer as its rate bucket names it (``member:WORKSPACE/NAME``)."""
        claims = self.claims(token, SCOPE_WRITE)
        expected = f"{self._session(sid).workspace}/{member}"
        if claims is None:
            return f"member:{expected}"
        workspace, _, name = expected.partition("/")
        if (
            claims.sub_kind != "member"
            or claims.sub != expected
            or not self.member_active(workspace, name)
        ):
            raise Unauthorized(
                f"the token is {claims.actor}'s, not member {expected}'s", code="token_subject"
            )
        return claims.actor
