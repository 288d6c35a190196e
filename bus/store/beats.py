"""The heartbeats' read: every worker's and the scheduler's beat with its queue depth.
Standard library only: the read lane (:mod:`bus.store.lite_reads`) mixes it in too."""

from __future__ import annotations

from .base import StorePart

# Not ``typing.TYPE_CHECKING``: importing typing alone costs the read lane several ms.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable


class BeatStore(StorePart):
    """Reads the heartbeats the processes write (:class:`bus.telemetry.liveness.Heartbeat`)."""

    def beats(self, queue_of: Callable[[str], str | None]) -> list[tuple[str, dict[str, str], int]]:
        """Every heartbeat, by name: ``(name, fields, depth of queue_of(name))``, the depth
        0 where ``queue_of`` names no broker queue; one round trip."""
        names = sorted(str(n) for n in self.r.smembers(self.k.workers))
        pipe = self.pipeline()
        queues = [queue_of(name) for name in names]
        for name, queue in zip(names, queues, strict=True):
            pipe.hgetall(self.k.beat(name))
            if queue is not None:
                pipe.llen(self.k.celery_queue(queue))
        replies = iter(pipe.execute() if names else [])
        out = []
        for name, queue in zip(names, queues, strict=True):
            fields = dict(next(replies))
            out.append((name, fields, int(next(replies)) if queue is not None else 0))
        return out
