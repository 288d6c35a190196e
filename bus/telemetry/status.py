"""``inbox status``: the bus as one host sees it, in one JSON answer."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bus.core.hook_env import redact
from bus.store import server_memory

from . import liveness

if TYPE_CHECKING:
    from bus.core.settings import Settings
    from bus.store.store import Store


def status_report(store: Store, settings: Settings) -> dict[str, Any]:
    """The host, the store's address (its password hidden), the floor's home, every
    session with its backlog, each host's worker and the scheduler (heartbeat ages and
    queue depth), and the server memory settings the scheduler keeps."""
    sessions = []
    for s in store.sessions():
        row = s.model_dump(exclude_none=True)
        row["backlog"] = store.backlog(s.session)
        sessions.append(row)
    return {
        "ok": True,
        "host": settings.host,
        "store": redact(settings.store_url()),
        "home": str(settings.home),
        "sessions": sessions,
        "workers": liveness.workers(store),
        "memory_settings": server_memory.report(store),
    }
