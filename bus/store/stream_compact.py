"""The store's compaction of short streams (:mod:`bus.store.compaction`): one script per stream,
pipelined, each stream a key of its own slot.

A part of the store's ``events`` aggregate (:class:`bus.store.store.Events`).
"""

from __future__ import annotations

from bus.core.settings import SUB_IDLE_S

from .base import StorePart
from .keys import is_thread_id

SUB_IDLE_MS = int(SUB_IDLE_S * 1000)


class CompactStore(StorePart):
    """Short streams rewritten to the memory their entries need."""

    def compact_streams(
        self, keys: list[str], max_entries: int, slack: int, node_bytes: int, settled_ms: int
    ) -> int:
        """Run ``stream_compact.lua`` on each stream of ``keys`` (built by
        :class:`~bus.store.keys.Keys`) whose newest entry is ``settled_ms`` old; the bytes
        saved, by MEMORY USAGE. One round trip per node; raises the server's error when it
        refuses DUMP, RESTORE or MEMORY."""
        if not keys:
            return 0
        args = [max_entries, slack, node_bytes, settled_ms]
        calls = [self.script_call("stream_compact", [key], args) for key in keys]
        return sum(int(x or 0) for x in self.run_scripts(calls))

    def drop_quiet_events(
        self, sids: list[str], quiet_ms: int, sub_idle_ms: int = SUB_IDLE_MS
    ) -> int:
        """Drop the ``events`` of each of ``sids`` whose newest record is older than
        ``quiet_ms`` and that no durable subscription used within ``sub_idle_ms``
        (``events_quiet.lua``); the bytes freed, by MEMORY USAGE."""
        if not sids:
            return 0
        calls = [
            self.script_call(
                "events_quiet",
                list(self.k.s_many(sid, ("events", "subs"))),
                [int(quiet_ms), int(sub_idle_ms)],
            )
            for sid in sids
        ]
        return sum(int(x or 0) for x in self.run_scripts(calls))

    def drop_taken_queues(self, sids: list[str]) -> None:
        """``queue_trim.lua`` on each of ``sids``: a queue the delivery took whole goes
        with its cursor (one a delivery trimmed within its cursor's ms kept)."""
        if not sids:
            return
        keys = ("stream", "cursor")
        self.run_scripts(
            [self.script_call("queue_trim", list(self.k.s_many(sid, keys)), []) for sid in sids]
        )

    def session_streams(self, sids: list[str], threads_from: int = 0) -> list[str]:
        """The streams a quiet session keeps: its ``events`` and each of its threads'
        ``log``s (a thread shared by two sessions once; only those whose newest message is
        ``threads_from`` ms or later), one round trip per node."""
        pipe = self.pipeline()
        low = max(0, threads_from)  # never below 0: the ids' ages are negative
        for sid in sids:
            pipe.zrangebyscore(self.k.s(sid, "threads"), low, "+inf")
        keys = [self.k.s(sid, "events") for sid in sids]
        seen: set[str] = set()
        for threads in pipe.execute():
            for thread in threads:
                if thread not in seen and is_thread_id(str(thread)):
                    seen.add(thread)
                    keys.append(self.k.t(str(thread), "log"))
        return keys
