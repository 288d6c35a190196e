"""``inbox status``: the bus as one host sees it, in one JSON answer."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bus.core.disk_space import with_disk
from bus.core.hook_env import redact
from bus.core.status_view import local_sessions
from bus.core.status_view import status_report as report
from bus.core.store_faults import with_storage
from bus.core.wake_consent import wake_off
from bus.local import unix_socket
from bus.local.up_procs import read_procs
from bus.store import server_memory

from . import liveness

if TYPE_CHECKING:
    from bus.core.settings import Settings
    from bus.store.store import Store


def status_report(store: Store, settings: Settings) -> dict[str, Any]:
    """The host, the store's address (its password hidden), the floor's home, every
    session with its backlog, each host's worker and the scheduler (heartbeat ages and
    queue depth), the processes this host's ``inbox up`` runs (spares named ``standby``)
    and the server memory settings the scheduler keeps, and ``storage``: whether the
    store takes writes (``ok`` false, the reason and fix, when it refuses them). A session of this host whose
    socket cannot be had says why and the fix (``unreachable``)."""
    sessions = store.sessions.sessions()
    rows = [s.model_dump() for s in sessions]
    answer = report(
        host=settings.host,
        store=redact(settings.store_url()),
        home=str(settings.home),
        sessions=rows,
        backlogs=store.queue.backlogs([s.session for s in sessions]),
        workers=liveness.workers(store, settings.host_down_s),
        memory=server_memory.report(store),
        unreachable=unix_socket.session_problems(
            settings.home, local_sessions(settings.host, rows)
        ),
        processes=read_procs(settings.home),
        wake_off=wake_off(str(settings.home), settings.host, rows),
    )
    # Not ok when the store refuses writes, or the disk holding the home is full.
    return with_disk(with_storage(answer, store.server.write_fault()), str(settings.home))
