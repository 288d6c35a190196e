"""The heartbeats' read: every worker's and the scheduler's beat with its queue depth.
Standard library only: the read lane (:mod:`bus.lanes.lite_store`) mixes it in too."""

from __future__ import annotations

import time

from .base import StorePart

# Not ``typing.TYPE_CHECKING``: importing typing alone costs the read lane several ms.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

# A heartbeat's fields a host's state is judged by (bus.core.status_view.host_state).
BEAT_FIELDS = ("beat", "starting")


def queue_beat_read(pipe: Any, keys: Any, name: str) -> None:
    """Queue on ``pipe`` the read of ``name``'s beat (:func:`beat_reply` reads its reply):
    the one spelling of it, for :meth:`BeatStore.queue_beats` and a write that answers
    with a host's state in its own round trip (:meth:`bus.store.queue.QueueStore.append`)."""
    pipe.hmget(keys.beat(name), *BEAT_FIELDS)


def queue_mark_starting(pipe: Any, keys: Any, host: str) -> None:
    """Queue on ``pipe`` host ``host``'s worker marked as being started: its heartbeat's
    ``starting`` now, and the host among the heartbeats' names (another slot on a
    cluster: one key a command). For :meth:`BeatStore.mark_starting` and the process
    runner's probe (:meth:`bus.store.server_probe.Progress.mark_starting`)."""
    pipe.hset(keys.beat(host), "starting", int(time.time() * 1000))
    pipe.sadd(keys.workers, host)


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

    def beats_at(self, names: list[str]) -> list[tuple[int | None, int | None]]:
        """Each name's ``(beat, starting)`` in ms, in order, in one round trip: its last
        heartbeat and when its worker was last started (``None``: never;
        :func:`bus.core.status_view.host_state` judges them)."""
        pipe = self.pipeline()
        self.queue_beats(pipe, names)
        got = pipe.execute() if names else []
        return [beat_reply(v) for v in got]

    def queue_beats(self, pipe: Any, names: list[str]) -> None:
        """Queue on ``pipe`` the beat of each name, in order (:func:`beat_reply` reads
        each reply): a write that answers with a host's state reads it in its own round
        trip."""
        for name in names:
            queue_beat_read(pipe, self.k, name)

    def drop_beat(self, name: str) -> bool:
        """Forget heartbeat ``name`` (its row and its place among the names); whether it
        was there."""
        pipe = self.pipeline()
        pipe.delete(self.k.beat(name))
        pipe.srem(self.k.workers, name)  # another slot on a cluster: one key a call
        gone, listed = pipe.execute()
        return bool(gone or listed)

    def mark_starting(self, host: str) -> None:
        """Host ``host``'s worker is being started: its heartbeat's ``starting`` now, so
        the host is ``starting`` (not ``down``) until its first beat."""
        pipe = self.pipeline()
        queue_mark_starting(pipe, self.k, host)
        pipe.execute()


def _ms(raw: Any) -> int | None:
    text = raw.decode() if isinstance(raw, bytes) else raw
    return int(text) if text is not None and str(text).isdigit() else None


def beat_reply(raw: Any) -> tuple[int | None, int | None]:
    """A heartbeat's ``HMGET beat starting`` reply as ms, ``None`` for a field not there."""
    beat, starting = raw if raw else (None, None)
    return _ms(beat), _ms(starting)
