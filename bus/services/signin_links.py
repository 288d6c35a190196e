"""Sign-in links for the web inbox (``inbox member link WORKSPACE/NAME``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from bus.core.errors import BadInput, Refused
from bus.trust.tokens import SCOPE_READ, SCOPE_WRITE

# A link is a bearer credential sitting in a chat or a mail box: it expires by default.
DEFAULT_LINK_TTL_S = 7 * 24 * 3600
MEMBER_SCOPES = (SCOPE_READ, SCOPE_WRITE)


def login_url(base: str, token: str) -> str:
    """``<base>/ui/login?token=...``; the page swaps the token for a cookie at once."""
    return f"{base.rstrip('/')}/ui/login?token={quote(token, safe='')}"


class SigninLinks:
    """Member links for the web inbox at ``ui_url``: a member's lookup (``is_member``) and
    the token issuer (:meth:`bus.services.credentials.Credentials.issue_token`)."""

    def __init__(
        self,
        ui_url: str,
        *,
        is_member: Callable[[str, str], bool],
        issue_token: Callable[..., dict[str, Any]],
    ) -> None:
        self.ui_url, self.is_member, self.issue_token = ui_url, is_member, issue_token

    def member_link(self, member: str, *, ttl_s: int | None = None) -> dict[str, Any]:
        """A member token for an active member and the link that signs them in with it."""
        if not isinstance(member, str) or member.count("/") != 1:
            raise BadInput(f"a member is WORKSPACE/NAME, not {str(member)[:60]!r}")
        workspace, _, name = member.partition("/")
        if not self.is_member(workspace, name):
            raise Refused(
                f"{name!r} is not a member of workspace {workspace!r}", code="not_a_member"
            )
        issued = self.issue_token(
            member=member,
            scopes=MEMBER_SCOPES,
            ttl_s=DEFAULT_LINK_TTL_S if ttl_s is None else ttl_s,
        )
        return {
            "ok": True,
            "url": login_url(self.ui_url, issued["token"]),
            "token": issued["token"],
            "member": member,
            "exp": issued["exp"],
        }
