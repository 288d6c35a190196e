"""What the store keeps of one host, and forgetting it (``inbox host forget``).

A host is known by what its processes wrote: its worker's heartbeat and its scheduler's
(``P:beat:<host>``, ``P:beat:scheduler.<host>``, both listed in ``P:workers``), the floor
that serves it and the last worker refused it (``P:hostclaim:<host>``, ``...:refused``),
its delivery loops' kick list (``P:{kick:<host>}:*``) and its Celery queue
(``P:celery:host.<host>``). Keys come from :mod:`bus.store.keys`. The caller decides
whether the host may be forgotten (bus.telemetry.host_retire); this only deletes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bus.core.status_view import host_queue, scheduler_beat

if TYPE_CHECKING:
    from .store import Store


def forget_host(store: Store, host: str) -> dict[str, int]:
    """Delete every key of host ``host``; ``{"keys": deleted, "queued": tasks its Celery
    queue held}``. Two round trips (its loops' names, then one pipeline: on a cluster the
    keys are in several slots, each command one key)."""
    k = store.k
    loops = [str(x) for x in store.r.hkeys(k.kick_loops(host))]
    names = (host, scheduler_beat(host))
    queue = k.celery_queue(host_queue(host))
    keys = [
        *(k.beat(name) for name in names),
        k.host_claim(host),
        k.host_refused(host),
        k.kick_list(host),
        k.kick_alive(host),
        k.kick_loops(host),
        *(k.kick_taken(host, loop) for loop in loops),
    ]
    pipe: Any = store.pipeline()
    pipe.llen(queue)
    for key in (*keys, queue):
        pipe.delete(key)
    for name in names:
        pipe.srem(k.workers, name)
    replies = pipe.execute()
    return {"keys": sum(int(n) for n in replies[1 : 2 + len(keys)]), "queued": int(replies[0])}


__all__ = ["forget_host"]
