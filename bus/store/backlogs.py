"""The sessions' backlogs: the messages each queue holds that its delivery has not taken.
Standard library only: the read lane (:mod:`bus.lanes.lite_store`) mixes it in too."""

from __future__ import annotations

from .base import StorePart

BACKLOG_CAP = 10_000


class BacklogStore(StorePart):
    """Reads how far each session's delivery lags behind its queue."""

    def backlogs(self, sids: list[str], cap: int = BACKLOG_CAP) -> list[int]:
        """Each session's messages after its cursor (counted up to ``cap``). The usual
        answer, all 0, costs one round trip: each cursor is its stream's last id."""
        pipe = self.pipeline()
        for sid in sids:
            pipe.get(self.k.s(sid, "cursor"))
            pipe.xrevrange(self.k.s(sid, "stream"), count=1)
        got = pipe.execute() if sids else []
        out = []
        for n, sid in enumerate(sids):
            cursor, last = got[2 * n], got[2 * n + 1]
            if not last or (cursor and str(last[0][0]) == cursor):
                out.append(0)
                continue
            rows = self.r.xrange(self.k.s(sid, "stream"), min=f"({cursor or '0-0'}", count=cap)
            out.append(len(rows))
        return out

    def backlog(self, sid: str, cap: int = BACKLOG_CAP) -> int:
        """One session's :meth:`backlogs`."""
        return self.backlogs([sid], cap)[0]

    def oldest_waiting(self, sids: list[str]) -> list[int | None]:
        """When each session's oldest message still waiting for a notice arrived (ms):
        the first one its delivery has not taken (its stream entry's time) or the oldest
        taken but in no notice yet (``new``), ``None`` where none waits. Two round trips."""
        pipe = self.pipeline()
        for sid in sids:
            pipe.get(self.k.s(sid, "cursor"))
            pipe.zrange(self.k.s(sid, "new"), 0, 0, withscores=True)
        got = pipe.execute() if sids else []
        pipe = self.pipeline()
        for n, sid in enumerate(sids):
            pipe.xrange(self.k.s(sid, "stream"), min=f"({got[2 * n] or '0-0'}", count=1)
        firsts = pipe.execute() if sids else []
        out: list[int | None] = []
        for n in range(len(sids)):
            times = [int(score) for _member, score in got[2 * n + 1]]
            if firsts[n]:
                times.append(int(str(firsts[n][0][0]).split("-", 1)[0]))
            out.append(min(times) if times else None)
        return out

    def oldest_wake_notices(self, sids: list[str]) -> list[int | None]:
        """When each session's oldest notice still on its floor that carries a message
        worth a wake was written (ms), ``None`` where none waits. One round trip."""
        import json

        pipe = self.pipeline()
        for sid in sids:
            pipe.hvals(self.k.s(sid, "floor"))
        got = pipe.execute() if sids else []
        out: list[int | None] = []
        for values in got:
            times = []
            for raw in values:
                try:
                    rec = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(rec, dict) and rec.get("wake") and str(rec.get("at", "")).isdigit():
                    times.append(int(rec["at"]))
            out.append(min(times) if times else None)
        return out
