"""The secured scenes the attack tests start from: two workspaces on one bus, and a thread
between two members' sessions of one workspace."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from bus.api import Bus
from tests.support.trust import DEAN, ERIN, SECRET, WS, tok


@pytest.fixture
def two(make_bus: Callable[..., Bus]) -> Bus:
    """Workspaces acme (dean; session bob) and beta (erin; session other); loner in none."""
    b = make_bus(secret=SECRET)
    b.items.member_add("acme", "dean")
    b.items.member_add("beta", "erin")
    # Joining a workspace takes its starter's member token.
    b.open_session("bob", handle="ha:bob", workspace="acme", starter="dean", token=DEAN)
    b.open_session("other", handle="hb:other", workspace="beta", starter="erin", token=ERIN)
    b.open_session("loner", handle="hc:loner")
    return b


@pytest.fixture
def secured(make_bus: Callable[..., Bus]) -> Bus:
    """alice and bob in workspace acme (started by member dean); alice wrote to bob."""
    b = make_bus(secret=SECRET)
    b.items.member_add(WS, "dean")
    dean = tok(member=f"{WS}/dean")  # joining a workspace takes its starter's token
    b.open_session("alice", handle="ha:alice", workspace=WS, starter="dean", token=dean)
    b.open_session("bob", handle="ha:bob", workspace=WS, starter="dean", token=dean)
    b.open_session("mallory", handle="ha:mallory")
    b.send({"to_id": "bob", "text": "the secret plan"}, token=tok(session="alice"))
    b.deliver_session("bob")
    return b
