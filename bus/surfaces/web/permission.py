"""Who may do what in the web inbox: ONE check, :func:`check`, that every view calls.

The rule itself is :func:`decide`, a pure function over the facts (table-tested); the
check gathers those facts from the bus. It agrees with the bus's own token rule: a
member acts only on items of sessions started in their own workspace, and only while
their account is active; an operator sees every session but writes on no item (items
are answered by members).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from bus.core.errors import BadInput, NotFound, Refused, Unauthorized

if TYPE_CHECKING:
    from bus.api import Bus

ViewerKind = Literal["member", "operator"]
# What a view needs: the member's item list, read or write one item, or the operator pages.
Need = Literal["items", "item_read", "item_write", "operate"]
NEEDS: tuple[Need, ...] = ("items", "item_read", "item_write", "operate")
LOCAL_OPERATOR = "local"


@dataclass(frozen=True)
class Viewer:
    """A signed-in person: a member (``workspace``/``name``) or an operator (``name``).

    ``token`` is the sign-in token the cookie carries (None for the local operator, who
    is any loopback visitor of a bus without ``INBOX_SECRET``).
    """

    kind: ViewerKind
    name: str
    workspace: str | None = None
    token: str | None = None
    jti: str | None = None

    @property
    def label(self) -> str:
        return f"{self.workspace}/{self.name}" if self.kind == "member" else self.name


def decide(
    kind: ViewerKind | None,
    need: Need,
    *,
    member_active: bool = False,
    own_workspace: bool = False,
) -> str | None:
    """The refusal code for ``need``, or None when allowed.

    ``member_active``: the viewer is an active member of their workspace (members only);
    ``own_workspace``: the item's session was started in the viewer's workspace.
    """
    if need not in NEEDS:
        raise BadInput(f"unknown permission need {need!r}")
    if kind is None:
        return "signed_out"
    if kind == "operator":
        return None if need in ("operate", "item_read") else "members_only"
    if need == "operate":
        return "operators_only"
    if not member_active:
        return "not_a_member"
    if need == "items":
        return None
    return None if own_workspace else "not_your_workspace"


_MESSAGES = {
    "signed_out": "sign in first: open the link `inbox member link` printed for you",
    "members_only": "only a member of the item's workspace may do this",
    "operators_only": "this page is for operators",
    "not_a_member": "you are no longer a member of this workspace",
    "not_your_workspace": "this item is not in your workspace",
}


def check(bus: Bus, viewer: Viewer | None, need: Need, sid: str | None = None) -> None:
    """Refuse (``Unauthorized`` when signed out, else ``Refused``) unless ``viewer`` may
    do ``need``, on session ``sid``'s items for the item needs. Every view calls this."""
    kind = viewer.kind if viewer else None
    active = own = False
    if viewer is not None and viewer.kind == "member" and viewer.workspace:
        active = bus.items.is_member(viewer.workspace, viewer.name)
        if sid is not None and active:
            try:
                own = bus.session(sid).workspace == viewer.workspace
            except NotFound:
                # The same answer as another workspace's session: no existence oracle.
                own = False
    if need in ("item_read", "item_write") and sid is None:
        raise BadInput("an item permission needs the item's session")
    code = decide(kind, need, member_active=active, own_workspace=own)
    if code == "signed_out":
        raise Unauthorized(_MESSAGES[code], code=code)
    if code is not None:
        raise Refused(_MESSAGES[code], code=code)
