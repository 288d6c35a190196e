"""The store's schedule: what is due when (wakes, flushes, retries, lease kicks), and the
sweeps' claims and the workers' heartbeats.

A part of the store's ``schedule`` aggregate (:class:`bus.store.store.Schedule`). The schedule is one
sorted set of ``what|sid`` by due time (ms); entries are taken atomically
(``take_due.lua``), so each goes to exactly one scheduler; a sleeping scheduler is poked
through a one-element list when an entry falls due soon.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from bus.core.models import SessionInfo, check_session_id, now_ms

from .base import StorePart
from .many import SweepView, stream_id_after
from .session_record import record_info

# A schedule entry due sooner than this from now wakes a sleeping scheduler (a second:
# above the scheduler's half-second cap on its sleep, with room for a slow tick).
POKE_WITHIN_MS = 1000


# The schedule's entry for a wake's turn: due once a woken session's harness had
# INBOX_WAKE_TURN_TIMEOUT_S to report its turn (bus.delivery.scheduler).
WAKE_TURN = "turn"


class ScheduleStore(StorePart):
    """The schedule, the sweeps' claims and the heartbeats."""

    def schedule(self, what: str, sid: str, at_ms: int, *, earliest: bool = True) -> None:
        """Put ``what`` for ``sid`` on the schedule; keep the earlier time if one is there."""
        check_session_id(sid)
        # LT keeps the earlier of two times and still adds a new member.
        pipe = self.pipeline()
        pipe.zadd(self.k.due, {f"{what}|{sid}": at_ms}, lt=earliest)
        # Due soon: a sleeping scheduler wakes for it (in the same round trip).
        self.poke_scheduler(at_ms, pipe=pipe)
        pipe.execute()

    def end_unheard_wakes(self, sids: list[str], cutoff: int, now: int) -> list[str]:
        """Those of ``sids`` woken at or before ``cutoff`` (ms) whose harness reported no
        turn since, set back to idle (``wake_timeout.lua``), in one round trip."""
        if not sids:
            return []
        sha = self.script("wake_timeout").sha
        calls = [
            ("EVALSHA", sha, 2, *self.k.s_many(sid, ("session", "events")), cutoff, now)
            for sid in sids
        ]
        return [sid for sid, r in zip(sids, self.run_scripts(calls), strict=True) if int(r)]

    def unschedule(self, what: str, sid: str) -> None:
        """Take ``what`` for ``sid`` off the schedule (nothing if it is not there)."""
        self.r.zrem(self.k.due, f"{what}|{sid}")

    def take_due(self, now: int, limit: int = 500) -> list[tuple[str, str]]:
        """Take up to ``limit`` entries due at ``now`` (ms) or earlier, as ``(what, sid)``,
        removing them atomically: each is returned to exactly one caller."""
        return _entries(self.script("take_due")(keys=[self.k.due], args=[now, limit]))

    def take_due_as(
        self, taker: str, claim_ms: int, now: int, limit: int = 500
    ) -> tuple[list[tuple[str, str]], int, int | None]:
        """:meth:`take_due` by scheduler ``taker``, only while it holds the taker claim
        (claimed when free, renewed for ``claim_ms`` by each take): ``(taken, left_ms,
        next_due)``. ``left_ms`` 0: it holds the claim and took; else another holds it for
        that long and nothing was taken. ``next_due``: the earliest due time left (ms),
        ``None`` when the schedule is empty or nothing was taken. While another's claim
        cannot have lapsed, answered without a round trip (:meth:`claim_sweep`'s rule)."""
        key = self.k.due_taker
        wait_ms = self._claim_wait_ms(key)
        if wait_ms:
            return [], wait_ms, None
        keys = [self.k.due, key]
        items, left, first = self.script("take_due")(keys=keys, args=[now, limit, taker, claim_ms])
        if int(left):
            self._claim_held(key, int(left))
        return _entries(items), int(left), (int(float(first)) if first else None)

    def release_taker(self, taker: str) -> bool:
        """Give the taker claim up if ``taker`` holds it (a scheduler stopping)."""
        return bool(self.script("unlock")(keys=[self.k.due_taker], args=[taker]))

    def next_due(self) -> int | None:
        """The earliest due time on the schedule (ms), ``None`` when it is empty."""
        rows = self.r.zrange(self.k.due, 0, 0, withscores=True)
        return int(rows[0][1]) if rows else None

    def sweep_candidates(self, sids: list[str]) -> list[str]:
        """Those of ``sids`` the backlog sweep must read (:meth:`sweep_views`): each
        session's quiet test (``sweep_quiet.lua``: nothing past its cursor, in flight, new,
        on the floor or wake pending) runs on the server, one small reply a session in
        one round trip per node. A session it leaves out is one the sweep would not
        deliver; one it keeps may still be (the sweep decides from its view)."""
        if not sids:
            return []
        sha = self.script("sweep_quiet").sha
        keys = ("session", "cursor", "stream", "notice", "new", "floor")
        calls = [("EVALSHA", sha, len(keys), *self.k.s_many(sid, keys)) for sid in sids]
        return [sid for sid, r in zip(sids, self.run_scripts(calls), strict=True) if int(r)]

    def sweep_views(self, sids: list[str]) -> list[tuple[SessionInfo, SweepView]]:
        """:meth:`get_session` and what the backlog sweep looks at (the notice in flight's
        start, whether messages are new, the due and retry times on the schedule, the
        floor's unconfirmed notice records) of many sessions, with whether each has queue
        entries no delivery took (its stream's last id past its cursor), in one
        round trip per node; sessions that do not exist are left out. The backlog sweep
        reads a chunk of sessions this way."""
        pipe = self.pipeline()
        for sid in sids:
            pipe.hgetall(self.k.s(sid, "session"))
            pipe.get(self.k.s(sid, "cursor"))
            pipe.xrevrange(self.k.s(sid, "stream"), count=1)
            pipe.hget(self.k.s(sid, "notice"), "at")
            pipe.exists(self.k.s(sid, "new"))
            for what in ("due", "retry"):
                pipe.zscore(self.k.due, f"{what}|{sid}")
            pipe.hvals(self.k.s(sid, "floor"))
        got = pipe.execute()
        out = []
        for n in range(len(sids)):
            data, cursor, last, flight_at, has_new, due_at, retry_at, floor = got[8 * n : 8 * n + 8]
            if not data:
                continue
            view = SweepView(
                backlog=bool(last) and stream_id_after(str(last[0][0]), cursor),
                flight_at=None if flight_at is None else int(flight_at),
                has_new=bool(has_new),
                due_at=None if due_at is None else int(due_at),
                retry_at=None if retry_at is None else int(retry_at),
                floor_records=[str(r) for r in floor],
            )
            out.append((record_info(data, sids[n]), view))
        return out

    def beat(self, name: str, fields: dict[str, Any], *, done: bool = False) -> None:
        """Write ``name``'s heartbeat fields (``done``: one more task finished) and list
        the name among those with a heartbeat."""
        key = self.k.beat(name)
        pipe = self.pipeline()
        pipe.hset(key, mapping=fields)
        if done:
            pipe.hincrby(key, "done", 1)
        pipe.sadd(self.k.workers, name)
        pipe.execute()

    # This process's clock for when a claim may be free again (a test moves it).
    claim_clock: Callable[[], float] = staticmethod(time.monotonic)

    def claim_sweep(self, every_ms: int, *, what: str = "backlog") -> bool:
        """True for one caller per ``every_ms`` across every process (SET NX PX): the
        backlog sweep (``what="backlog"``), the receipts' expiry pass (``"expiry"``) or
        the short streams' compaction (``"compact"``, :mod:`bus.store.compaction`) then runs once
        an interval, not once per scheduler or pool child.

        The claim's time left comes back with it, and until then this process does not
        ask again (False, no round trip): ten schedulers each woken for every due wake
        asked three times a tick, 300 calls a second of a 10-host swarm's. A claim key lost
        with a restarted server is asked for again within one interval."""
        keys = {"backlog": self.k.sweep, "expiry": self.k.expiry_sweep}
        key = keys.get(what) or self.k.compact_sweep
        if self._claim_wait_ms(key):
            return False
        pipe = self.pipeline()
        pipe.set(key, "1", nx=True, px=every_ms)
        pipe.pttl(key)  # one key: one slot, one round trip
        ok, left_ms = pipe.execute()
        self._claim_held(key, every_ms if ok else max(0, int(left_ms)))
        return bool(ok)

    def _claim_wait_ms(self, key: str) -> int:
        """How long (ms) the claim ``key`` was last seen held for yet: 0 when it may be
        free (ask the server)."""
        free_at: dict[str, float] = self.__dict__.get("_claims_free_at", {})
        left = free_at.get(key, float("-inf")) - self.claim_clock()
        return max(1, int(left * 1000)) if left > 0 else 0

    def _claim_held(self, key: str, left_ms: int) -> None:
        """The claim ``key`` is held (by anyone) for ``left_ms`` more: not asked before."""
        free_at: dict[str, float] = self.__dict__.setdefault("_claims_free_at", {})
        free_at[key] = self.claim_clock() + left_ms / 1000

    def schedule_many(self, what: str, due: list[tuple[str, int]]) -> None:
        """:meth:`~bus.store.store.Store.schedule` (earliest) for each ``(sid, at_ms)``, at once;
        a sleeping scheduler poked (:meth:`poke_scheduler`) in the same round trip when
        one is due soon."""
        if not due:
            return
        pipe = self.pipeline()
        pipe.zadd(self.k.due, {f"{what}|{sid}": at for sid, at in due}, lt=True)
        self.poke_scheduler(min(at for _sid, at in due), pipe=pipe)
        pipe.execute()

    def poke_scheduler(self, at_ms: int, *, pipe: Any = None) -> bool:
        """Wake a sleeping scheduler (:meth:`wait_poked`) for an entry due at ``at_ms`` when
        that is within ``POKE_WITHIN_MS`` of now: the scheduler sleeps up to half a second
        between ticks, so an entry scheduled less than that ahead (an arrival delivered
        late, a short debounce) would be up to that late. At most one poke waits (the list
        is cut to one): a burst of them wakes the scheduler once. Queued on ``pipe`` when
        given; whether it poked."""
        if at_ms - now_ms() >= POKE_WITHIN_MS:
            return False
        client = self.pipeline() if pipe is None else pipe
        client.lpush(self.k.due_soon, "1")
        client.ltrim(self.k.due_soon, 0, 0)
        if pipe is None:
            client.execute()
        return True

    def wait_poked(self, timeout_s: float) -> bool:
        """Block up to ``timeout_s`` for a :meth:`poke_scheduler`; True when poked."""
        # Milliseconds: BLPOP takes a decimal timeout; 0 would block for ever.
        timeout = max(0.001, round(timeout_s, 3))
        return self.r.blpop([self.k.due_soon], timeout=timeout) is not None


def _entries(items: list[Any]) -> list[tuple[str, str]]:
    """``take_due.lua``'s ``<what>|<sid>`` members as ``(what, sid)``."""
    return [(what, sid) for what, _, sid in (str(item).partition("|") for item in items)]
