"""The store's items and typed-request side: item records and threads, request threads.

A part of the store's ``items`` aggregate (:class:`bus.store.store.Items`); the same contract: each
docstring says what any backend must do, and a read of a missing thing answers empty.
"""

from __future__ import annotations

import json

from .base import StorePart

# Not ``typing.TYPE_CHECKING``: importing typing alone costs the read lane several ms
# (bus.lanes.read imports this module).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class ItemStore(StorePart):
    """Items and typed request threads."""

    # -- items --------------------------------------------------------------------------------

    def item(self, sid: str, key: str) -> dict[str, Any] | None:
        """Session ``sid``'s item under ``key``; ``None`` if it has none."""
        raw = self.r.hget(self.k.items(sid), key)
        return dict(json.loads(raw)) if raw else None

    def items_of(self, sid: str) -> list[dict[str, Any]]:
        """Every item of the session, in no order."""
        return [json.loads(v) for v in self.r.hvals(self.k.items(sid))]

    def items_of_many(self, sids: list[str]) -> list[list[dict[str, Any]]]:
        """The items of several sessions, one round trip per node, in order."""
        pipe = self.pipeline()
        for sid in sids:
            pipe.hvals(self.k.items(sid))
        return [[json.loads(v) for v in vals] for vals in pipe.execute()]

    def item_thread(self, sid: str, key: str) -> list[dict[str, Any]]:
        """The item's thread entries, oldest first."""
        return [json.loads(e) for e in self.r.lrange(self.k.item_thread(sid, key), 0, -1)]

    def last_item_entries(self, pairs: list[tuple[str, str]]) -> list[dict[str, Any] | None]:
        """The newest thread entry of each ``(sid, key)`` item (``None`` for an empty one)."""
        pipe = self.pipeline()
        for sid, key in pairs:
            pipe.lindex(self.k.item_thread(sid, key), -1)
        return [json.loads(e) if e else None for e in pipe.execute()]

    def post_item(self, sid: str, key: str, item: dict[str, Any]) -> dict[str, Any]:
        """Write ``item`` under ``key`` (``item_post.lua``): a new item at revision 1, or
        the next revision of an existing one, open again; the item as stored."""
        out = self.script("item_post")(keys=[self.k.items(sid)], args=[key, json.dumps(item)])
        return dict(json.loads(out))

    def update_item(
        self, sid: str, key: str, patch: dict[str, Any], entry: dict[str, Any] | None
    ) -> dict[str, Any] | None:
        """Apply ``patch`` to the item and append ``entry`` to its thread, atomically
        (``item_update.lua``); the item as it now is, ``None`` if there is no such item."""
        out = self.script("item_update")(
            keys=[self.k.items(sid), self.k.item_thread(sid, key)],
            args=[key, json.dumps(patch), json.dumps(entry) if entry else ""],
        )
        return dict(json.loads(out)) if out else None

    # -- typed request threads ------------------------------------------------------------------

    def open_request_thread(self, thread: str, fields: dict[str, str]) -> None:
        """Write a typed thread's record before its first message is delivered (the
        delivery's ``thread_append`` keeps a record whose ``key`` is set)."""
        self.r.hset(self.k.t(thread, "meta"), mapping=fields)

    def label_thread(self, thread: str, label: str) -> None:
        """Give ``thread`` the label its readers show, unless it has one: an item's
        thread, whose messages name it by its id, is labelled with the item's key. Its
        first delivery still makes the rest of its record (``thread_append.lua`` keeps a
        label already there)."""
        self.r.hsetnx(self.k.t(thread, "meta"), "label", label)

    def list_thread(self, sid: str, thread: str, at: int) -> None:
        """List ``thread`` among ``sid``'s threads, at ``at`` unless it is there later."""
        self.r.zadd(self.k.s(sid, "threads"), {thread: at}, gt=True)

    def decide(self, thread: str, args: list[Any]) -> str:
        """Apply one decision if the thread is still as the caller read it
        (``decide.lua``): ``ok``, ``missing`` or ``conflict``."""
        out = self.script("decide")(
            keys=[self.k.t(thread, "meta"), self.k.t(thread, "log"), self.k.t(thread, "seen")],
            args=args,
        )
        return str(out[0])

    def take_picture_bytes(self, sid: str, size: int, cap: int) -> bool:
        """Count ``size`` more bytes of pictures kept for ``sid``'s items, unless that
        would pass ``cap`` (then nothing is counted and the answer is False)."""
        key = self.k.s(sid, "picture_bytes")
        if int(self.r.incrby(key, size)) <= cap:
            return True
        self.r.decrby(key, size)
        return False

    def give_picture_bytes(self, sid: str, size: int) -> None:
        """Uncount bytes :meth:`take_picture_bytes` counted for a write that failed."""
        self.r.decrby(self.k.s(sid, "picture_bytes"), size)
