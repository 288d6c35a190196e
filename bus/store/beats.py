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

    def beat_at(self, name: str) -> int | None:
        """When ``name``'s last heartbeat was written (ms), ``None`` if it never beat."""
        return self.beats_at([name])[0]

    def beats_at(self, names: list[str]) -> list[int | None]:
        """:meth:`beat_at` of each name, in order, in one round trip."""
        pipe = self.pipeline()
        for name in names:
            pipe.hget(self.k.beat(name), "beat")
        got = pipe.execute() if names else []
        return [int(v) if v is not None and str(v).isdigit() else None for v in got]
