"""Tokens as the store knows them: issued, revoked, and of a member's current generation.

The signing and checking are :mod:`bus.trust.tokens` (pure); this module is what needs
the store around them: a revoked token's id, a member's token generation.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from bus.core.errors import BadInput
from bus.trust import tokens

if TYPE_CHECKING:
    from bus.core.settings import Settings
    from bus.store.store import Store
    from bus.trust.tokens import Claims


class Credentials:
    """Issue, revoke and judge tokens on one store (a provider, called on use)."""

    def __init__(self, store: Callable[[], Store], settings: Settings) -> None:
        self._store, self.settings = store, settings

    @property
    def store(self) -> Store:
        return self._store()

    def is_revoked(self, jti: str) -> bool:
        return self.store.members.is_revoked(jti)

    def token_current(self, claims: Claims) -> bool:
        """Whether a member token is of its member's current generation (removing a
        member kills every token issued before); other tokens always are."""
        if claims.sub_kind != "member":
            return True
        workspace, _, name = claims.sub.partition("/")
        try:
            return claims.gen >= self.store.members.member_generation(workspace, name)
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
            with contextlib.suppress(BadInput, ValueError):  # tokens.issue refuses a bad name
                gen = self.store.members.member_generation(workspace, name)
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
        self.store.members.revoke(claims.jti)
        return {"ok": True, "revoked": claims.jti, "subject": claims.actor}
