"""Tokens and counts the trust tests share: a secret and its tokens, the members of the
workspaces ``acme`` and ``beta``, and how many messages a session has stored."""

from __future__ import annotations

from typing import Any

from bus.api import Bus
from bus.trust.tokens import SCOPE_READ, SCOPE_THREAD, SCOPE_WRITE, issue

SECRET = "attack-secret-0123456789"
ALL = (SCOPE_READ, SCOPE_WRITE, SCOPE_THREAD)
WS = "acme"  # the workspace of the secured scenes


def tok(**kw: Any) -> str:
    """A token signed with :data:`SECRET` carrying every session scope, ``kw`` its claims."""
    return issue(SECRET, scopes=ALL, **kw)


DEAN = tok(member="acme/dean")
ERIN = tok(member="beta/erin")


def stored(b: Bus, sid: str) -> int:
    """Messages ever stored for ``sid``: one send answer each (a delivered queue is emptied,
    so its length counts only what waits); the receipts beside them (``~<id>``) not counted."""
    return sum(1 for f in b.store.r.hkeys(b.store.k.s(sid, "ids")) if not f.startswith("~"))


def keys_of(b: Bus) -> set[str]:
    """Every key of this bus's prefix."""
    return {str(k) for k in b.store.r.scan_iter(match=b.store.k.pattern(), count=1000)}
