"""Items as ``read_inbox`` shows them: each with its fields and its thread, who wrote each
entry named as its reader may know them. Pure, and standard library only: the library
(:mod:`bus.services.items`) and the read lane (:mod:`bus.lanes.read_answers`) both answer
with these.
"""

from __future__ import annotations

# Not ``typing.TYPE_CHECKING``: importing typing alone costs the read lane several ms.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

# A member's status in a workspace (``P:{ws:<w>}:members``).
ACTIVE, REMOVED = "active", "removed"
YOU = "you"
FORMER_MEMBER = "a former member"
# The fields read_inbox shows for each item, in this order.
VIEW_FIELDS = ("key", "title", "status", "answer", "revision", "settledAt", "updatedAt")


def entry_view(entry: dict[str, Any], statuses: dict[str, str]) -> dict[str, Any]:
    """One thread entry as read_inbox shows it: ``{from, text, files?}``; a member no
    longer active in ``statuses`` (name -> status) shows as a former member."""
    if entry.get("by") == "agent":
        who = YOU
    else:
        name = str(entry.get("member", ""))
        who = name if statuses.get(name) == ACTIVE else FORMER_MEMBER
    out: dict[str, Any] = {"from": who, "text": entry.get("text", "")}
    if entry.get("files"):
        out["files"] = list(entry["files"])
    return out


def item_view(
    item: dict[str, Any], entries: list[dict[str, Any]], statuses: dict[str, str]
) -> dict[str, Any]:
    """One item's :data:`VIEW_FIELDS` and its thread's entries (``entry_view``)."""
    out = {f: item.get(f) for f in VIEW_FIELDS}
    out["thread"] = [entry_view(e, statuses) for e in entries]
    return out


def inbox_view(
    items: list[dict[str, Any]],
    members_of: Callable[[str], dict[str, str]],
    thread_of: Callable[[str], list[dict[str, Any]]],
) -> list[dict[str, Any]]:
    """Every item, newest update first, each with its thread oldest first: ``members_of``
    reads a workspace's member statuses (once a workspace), ``thread_of`` an item's
    entries by its key."""
    ordered = sorted(items, key=lambda i: (-int(i.get("updatedAt") or 0), str(i.get("key"))))
    statuses: dict[str, dict[str, str]] = {}
    out = []
    for item in ordered:
        ws = item.get("workspace")
        if ws and ws not in statuses:
            statuses[ws] = members_of(ws)
        out.append(item_view(item, thread_of(item["key"]), statuses.get(ws or "", {})))
    return out
