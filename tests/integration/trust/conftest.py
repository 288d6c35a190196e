"""The trust tests' shared scene: two workspaces on one secured bus."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from bus.api import Bus
from tests.support.trust import DEAN, ERIN, SECRET


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
