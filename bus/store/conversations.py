"""The store's side of a conversation: withdrawing a message, waiting on a session's records.

A mixin of :class:`~bus.store.store.Store` like :mod:`bus.store.items`; the same contract.
"""

from __future__ import annotations

from typing import Any

from .base import StorePart

# The session's keys withdraw.lua takes, in its KEYS order (all in the {sid} slot).
_WITHDRAW_KEYS = ("ids", "msgs", "new", "wakeq", "notice", "events")


class ConversationStore(StorePart):
    """Withdraw a message; wait for a session's next durability record."""

    def withdraw(self, sid: str, msg_id: str, now_ms: int) -> list[str]:
        """Unsend ``msg_id`` if no notice has carried it, or say what else to do
        (``withdraw.lua``): ``[verdict, detail]``, the verdict one of ``unknown``,
        ``already``, ``unsent``, ``wait`` (a notice is on its way) or ``retract``."""
        out = self.script("withdraw")(
            keys=self.k.s_many(sid, _WITHDRAW_KEYS), args=[msg_id, now_ms]
        )
        return [str(x) for x in out]

    def wait_event(self, client: Any, sid: str, cursor: str, block_ms: int) -> str | None:
        """Block on ``client`` (one that may block) up to ``block_ms`` (at most one
        :data:`~bus.store.block_chunks.BLOCK_CHUNK_S` block: the caller loops) for a record of
        the session's ``events`` stream after ``cursor``: the newest id read, ``None`` if
        none came."""
        from .block_chunks import BLOCK_CHUNK_S

        block = max(1, min(block_ms, int(BLOCK_CHUNK_S * 1000)))
        got = client.xread({self.k.s(sid, "events"): cursor}, block=block)
        if isinstance(got, dict):  # RESP3 answers a dict key -> entries
            entries = next(iter(got.values()), None)
            entries = entries[0] if entries and isinstance(entries[0], list) else entries
        else:
            entries = got[0][1] if got else None
        return str(entries[-1][0]) if entries else None
