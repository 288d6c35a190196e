"""A session's threads as ``threads`` and ``read`` show them: one row a thread, one item a
message. Pure, and standard library only: the library (:mod:`bus.services.conversation`)
and the read lane (:mod:`bus.lanes.read_answers`) both answer with these.
"""

from __future__ import annotations

# Not ``typing.TYPE_CHECKING``: importing typing alone costs the read lane several ms.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

UNREAD = ("new", "noticed")


def thread_rows(
    thread_ids: list[str],
    metas: list[dict[str, Any]],
    records: list[dict[str, Any]],
    senders: Callable[[str | None], list[str]],
) -> list[dict[str, Any]]:
    """Each thread's row, in ``thread_ids``' order, from its meta and the session's own
    inbox records (``records``: all of them, any thread); ``senders`` reads the meta's
    stored list of senders."""
    mine: dict[str, list[dict[str, Any]]] = {}
    for rec in records:
        mine.setdefault(rec["thread"], []).append(rec)
    out = []
    for thr, meta in zip(thread_ids, metas, strict=True):
        recs = mine.get(thr, [])
        unread = [x for x in recs if x["mark"] in UNREAD]
        row: dict[str, Any] = {
            "threadId": thr,
            "key": meta.get("key", ""),
            "label": meta.get("label", thr),
            "from": senders(meta.get("senders")),
            "unread": len(unread),
            "new": sum(1 for x in recs if x["mark"] == "new"),
            "count": int(meta.get("count", 0)),
            "newestAt": int(meta.get("newest_at", 0)),
            "newestPreview": meta.get("newest_preview", ""),
            "class": "blocker"
            if any(x["class"] == "blocker" for x in unread)
            else meta.get("class", "action"),
        }
        if meta.get("state"):
            row["state"] = meta["state"]
        out.append(row)
    return out


def thread_view(
    thread: str,
    meta: dict[str, Any],
    msgs: list[dict[str, Any]],
    recs: dict[str, dict[str, Any]],
    *,
    mark_read: bool = False,
) -> dict[str, Any]:
    """A whole thread, oldest first, as the session whose records (by id) ``recs`` are reads
    it; with ``mark_read`` its unread messages show as read (the caller marks them)."""
    out = []
    for m in msgs:
        rec = recs.get(m["id"])
        mark = rec["mark"] if rec else "read"
        item: dict[str, Any] = {
            "id": m["id"],
            "from": m["from"],
            "fromSession": m.get("from_session"),
            "class": m.get("class", "action"),
            "kind": m.get("kind", "message"),
            "at": m.get("ts"),
            "text": m.get("text", ""),
            "read": mark in ("read", "answered") or (mark_read and mark in UNREAD),
            "verified": m.get("verified") is True,
        }
        if mark in ("retracted", "removed"):
            item["withdrawn"] = mark
        if m.get("files"):
            item["files"] = m["files"]
        out.append(item)
    result: dict[str, Any] = {
        "threadId": thread,
        "label": meta.get("label", thread),
        "messages": out,
    }
    if meta.get("state"):
        result["state"] = meta["state"]
    return result
