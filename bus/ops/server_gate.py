"""What ``inbox up`` and ``inbox doctor`` say of the store's server (bus.store.server_check).

A server below the store's floor stops ``inbox up`` (exit 1) and is a problem for
``inbox doctor``; one lacking a known security fix is said on one warning line and in
the doctor's ``warnings``, and the bus runs on.
"""

from __future__ import annotations

import sys
from typing import Any

from bus.core.settings import Settings
from bus.store.server_check import check_server


def up_gate(url: str, *, cluster: bool) -> bool:
    """Check the server at ``url`` for ``inbox up``: ``False`` (its line on stderr) when
    the bus must not run on it; a warning line when it lacks a fix; silent when it is
    fine or does not answer yet (the supervisor waits for it and says so)."""
    found = check_server(url, cluster=cluster)
    if found["state"] == "too_old":
        print(f"inbox up: refused: {found['message']}", file=sys.stderr, flush=True)
        return False
    if found["state"] in ("unfixed", "unknown"):
        print(f"inbox up: warning: {found['message']}", file=sys.stderr, flush=True)
    return True


def doctor_server(settings: Settings) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The doctor's ``server`` entry and its problem rows (none unless the server is
    below the floor; a missing fix is a warning in the entry, not a problem)."""
    found = check_server(settings.store_url(), cluster=settings.redis_cluster)
    problems = []
    if found["state"] == "too_old":
        problems.append(
            {
                "check": "server",
                "effect": "the bus's scripts fail on this server",
                "reason": found["message"],
                "fix": "upgrade the server (Redis 6.2 / Valkey 7.2.4 or later)",
            }
        )
    return found, problems


__all__ = ["doctor_server", "up_gate"]
