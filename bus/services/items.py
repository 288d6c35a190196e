"""Items for members, with pictures (Luke's read_inbox / reply_inbox).

An agent session posts items under keys it chooses; members of its workspace settle them
and write on them; the agent replies. An item and its thread live in the owning session's
slot (``P:{sid}:items``, ``P:{sid}:item:<key>:thread``), so a reply's entry and its moved
``updatedAt`` are one script. Every check runs before the first write: a refused call
writes nothing, neither to Redis nor to disk.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bus.core.errors import BadInput, NotFound, RateLimited, Refused
from bus.core.models import (
    ACTIVE,
    MAX_TEXT,
    REMOVED,
    RESERVED_WORKSPACES,
    SessionInfo,
    check_session_id,
    now_ms,
    parse_message,
)
from bus.core.private_files import private_dirs
from bus.core.threads import thread_id
from bus.store.keys import check_item_key

from .pictures import Picture, read_pictures, safe_name, store_picture

if TYPE_CHECKING:
    from .ports import HasStore, Poster

OPEN, SETTLED = "open", "settled"
FORMER_MEMBER = "a former member"
# Workspace names no member may have: ``operator:<name>`` is the web operator's handle.
YOU = "you"
MAX_TITLE = 200
MAX_TOPIC = 200
# The fields read_inbox shows for each item, in this order.
VIEW_FIELDS = ("key", "title", "status", "answer", "revision", "settledAt", "updatedAt")


# -- pure helpers -------------------------------------------------------------------------


def check_text(text: str | None, what: str = "text") -> str | None:
    """Markdown of at most 8000 characters; refused, not truncated."""
    if text is None:
        return None
    if not isinstance(text, str):
        raise BadInput(f"{what} must be a string")
    if len(text) > MAX_TEXT:
        raise BadInput(
            f"{what} is longer than {MAX_TEXT} characters (refused, not truncated)",
            code="text_too_long",
        )
    return text


def has_words(text: str | None) -> bool:
    return bool(text and text.strip())


def entry_view(entry: dict[str, Any], statuses: dict[str, str]) -> dict[str, Any]:
    """One thread entry as read_inbox shows it: ``{from, text, files?}``."""
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
    out = {f: item.get(f) for f in VIEW_FIELDS}
    out["thread"] = [entry_view(e, statuses) for e in entries]
    return out


def _moved(item: dict[str, Any]) -> int:
    # updatedAt must visibly move even within the millisecond of the previous write.
    return max(now_ms(), int(item.get("updatedAt") or 0) + 1)


# -- members ------------------------------------------------------------------------------


def _members(b: Poster, workspace: str) -> dict[str, str]:
    return b.store.members(check_session_id(workspace, "workspace"))


def member_status(b: HasStore, workspace: str, name: str) -> str | None:
    """``active``, ``removed`` (the account is gone), or None (never a member)."""
    check_session_id(name, "member name")
    return b.store.member_status(check_session_id(workspace, "workspace"), name)


def member_add(b: Poster, workspace: str, name: str) -> dict[str, Any]:
    """Add (or re-add) a member. A reserved workspace name, or a member whose handle
    ``workspace:name`` a live session already holds, is refused: two senders never
    share one name."""
    check_session_id(name, "member name")
    check_session_id(workspace, "workspace")
    if workspace in RESERVED_WORKSPACES:
        raise BadInput(f"workspace {workspace!r} is reserved", code="reserved_name")
    handle = f"{workspace}:{name}"
    if any(s.state != "closed" for s in b.store.sessions_by_handle(handle)):
        raise Refused(
            f"the handle {handle!r} is held by a session; close it before adding the member",
            code="handle_taken",
        )
    b.store.set_member(workspace, name, ACTIVE)
    return {"ok": True, "workspace": workspace, "member": name, "status": ACTIVE}


def member_remove(b: Poster, workspace: str, name: str) -> dict[str, Any]:
    """The account is gone: a tombstone stays so past messages read "a former member",
    and every token issued to the member so far is dead for good (its generation moves
    on: re-adding the member does not revive them)."""
    if member_status(b, workspace, name) is None:
        raise NotFound(f"{name!r} is not a member of {workspace!r}", code="unknown_member")
    b.store.set_member(workspace, name, REMOVED)
    b.store.bump_member_generation(workspace, name)
    return {"ok": True, "workspace": workspace, "member": name, "status": REMOVED}


def is_member(b: HasStore, workspace: str, name: str) -> bool:
    return workspace not in RESERVED_WORKSPACES and member_status(b, workspace, name) == ACTIVE


def _require_starter(b: Poster, info: SessionInfo, workspace: str | None) -> None:
    if not workspace or not info.starter or not is_member(b, workspace, info.starter):
        raise Refused(
            f"session {info.session}'s starter {info.starter!r} is not a member of "
            f"workspace {workspace!r}",
            code="starter_not_member",
        )


def _require_member(b: Poster, workspace: str | None, member: str) -> None:
    check_session_id(member, "member name")
    if not workspace or not is_member(b, workspace, member):
        raise Refused(f"{member!r} is not a member of workspace {workspace!r}", code="not_a_member")


# -- items --------------------------------------------------------------------------------


def files_dir(b: Poster, sid: str, key: str) -> Path:
    """Where an item's pictures are kept: ``$INBOX_HOME/items/<sid>/<key>/files/``."""
    check_session_id(sid)
    return Path(b.settings.home) / "items" / sid / check_item_key(key) / "files"


def _item(b: Poster, sid: str, key: str) -> dict[str, Any]:
    """The session's own item under ``key``; another session's key is simply not here."""
    item = b.store.item(sid, check_item_key(key))
    if item is None:
        raise NotFound(f"session {sid} has no item {key!r}", code="unknown_item", key=key)
    return item


def _update(
    b: Poster, sid: str, key: str, patch: dict[str, Any], entry: dict[str, Any] | None
) -> dict[str, Any]:
    out = b.store.update_item(sid, key, patch, entry)
    if out is None:
        raise NotFound(f"session {sid} has no item {key!r}", code="unknown_item", key=key)
    return out


def _keep(b: Poster, sid: str, key: str, pictures: list[Picture]) -> list[str]:
    target = files_dir(b, sid, key)
    if not pictures:
        return []
    size = sum(p.size for p in pictures)
    cap = b.settings.max_picture_bytes
    if not b.store.take_picture_bytes(sid, size, cap):
        raise RateLimited(
            f"session {sid}'s items keep {cap} bytes of pictures at most; these {size} "
            "bytes would pass it, nothing was stored",
            code="picture_quota",
            session=sid,
        )
    try:
        # items/, items/<sid>/, items/<sid>/<key>/ and files/ are all 0700.
        for d in (target.parent.parent.parent, target.parent.parent, target.parent):
            private_dirs(d)
        return [store_picture(target, pic).name for pic in pictures]
    except BaseException:
        b.store.give_picture_bytes(sid, size)
        raise


def _pictures(image_paths: Sequence[str | os.PathLike[str]], root: Path | str | None) -> list[Any]:
    paths = [os.fspath(p) for p in image_paths]
    if not paths:
        return []
    return read_pictures(paths, Path(root) if root is not None else Path.cwd())


def item_post(
    b: Poster, sid: str, key: str, *, title: str, text: str | None = None
) -> dict[str, Any]:
    """Post an item; again under the same key it is the next revision, open again."""
    info = b.session(sid)
    check_item_key(key)
    if not isinstance(title, str) or not title.strip() or len(title) > MAX_TITLE:
        raise BadInput(f"title must be 1-{MAX_TITLE} characters")
    check_text(text)
    if not info.workspace:
        raise Refused(f"session {sid} belongs to no workspace", code="no_workspace")
    _require_starter(b, info, info.workspace)
    at = now_ms()
    item = {
        "key": key,
        "title": title,
        "text": text,
        "status": OPEN,
        "answer": None,
        "revision": 1,
        "settledAt": None,
        "updatedAt": at,
        "createdAt": at,
        "workspace": info.workspace,
    }
    out = b.store.script("item_post")(keys=[b.store.k.items(sid)], args=[key, json.dumps(item)])
    return {"ok": True, "item": json.loads(out)}


def item_settle(b: Poster, sid: str, key: str, *, member: str, answer: str) -> dict[str, Any]:
    """A member of the item's workspace settles it with an answer."""
    b.session(sid)
    item = _item(b, sid, key)
    if not has_words(answer):
        raise BadInput("an answer must not be blank", code="empty_answer")
    check_text(answer, "answer")
    _require_member(b, item.get("workspace"), member)
    at = _moved(item)
    patch = {"status": SETTLED, "answer": answer, "settledAt": at, "updatedAt": at}
    return {"ok": True, "item": _update(b, sid, key, patch, None)}


def item_write(
    b: Poster,
    sid: str,
    key: str,
    *,
    member: str,
    text: str | None = None,
    image_paths: Sequence[str | os.PathLike[str]] = (),
    root: Path | str | None = None,
) -> dict[str, Any]:
    """A member writes on an item (open or settled); the agent hears of it, woken."""
    b.session(sid)
    item = _item(b, sid, key)
    check_text(text)
    workspace = item.get("workspace")
    _require_member(b, workspace, member)
    if not has_words(text) and not image_paths:
        raise BadInput("a message needs words, pictures, or both", code="empty_message")
    pictures = _pictures(image_paths, root)
    fields: dict[str, Any] = {
        "from": f"{workspace}:{member}",
        "to_id": sid,
        "kind": "item",
        "text": f"Inbox message on {key}: {text or ''}"[:MAX_TEXT],
        "thread": thread_id(sid, f"item:{key}"),
        "class": "action",
    }
    if len(f"item:{key}") <= MAX_TOPIC:
        fields["topic"] = f"item:{key}"
    msg = parse_message(fields)  # checked before anything is written
    names = _keep(b, sid, key, pictures)
    entry = {"by": "member", "member": member, "text": text or "", "files": names, "at": now_ms()}
    _update(b, sid, key, {"updatedAt": _moved(item)}, entry)
    if pictures:
        refs = [
            p.ref().model_copy(update={"name": n}) for p, n in zip(pictures, names, strict=True)
        ]
        msg = msg.model_copy(update={"files": refs})
    answer = b.post(msg)
    return {"ok": True, "key": key, "files": names, "id": msg.id, "thread": answer.get("thread")}


def read_inbox(b: Poster, sid: str) -> dict[str, Any]:
    """Every item of the agent, newest update first, each with its thread oldest first."""
    b.session(sid)
    items = b.store.items_of(sid)
    items.sort(key=lambda i: (-int(i.get("updatedAt") or 0), str(i.get("key"))))
    statuses: dict[str, dict[str, str]] = {}
    out = []
    for item in items:
        ws = item.get("workspace")
        if ws and ws not in statuses:
            statuses[ws] = _members(b, ws)
        thread = b.store.item_thread(sid, item["key"])
        out.append(item_view(item, thread, statuses.get(ws or "", {})))
    return {"items": out}


def reply_inbox(
    b: Poster,
    sid: str,
    key: str,
    *,
    text: str | None = None,
    image_paths: Sequence[str | os.PathLike[str]] = (),
    root: Path | str | None = None,
) -> dict[str, Any]:
    """The agent's own message on one of its items; status, answer, revision and
    settledAt stay, updatedAt moves. ``root`` is the sandbox pictures are read from
    (default: the working directory)."""
    info = b.session(sid)
    check_item_key(key)
    check_text(text)
    item = _item(b, sid, key)
    _require_starter(b, info, item.get("workspace"))
    if not has_words(text) and not image_paths:
        raise BadInput("a reply needs words, pictures, or both", code="empty_reply")
    pictures = _pictures(image_paths, root)
    # Everything is checked: from here on the reply is written.
    names = _keep(b, sid, key, pictures)
    entry = {"by": "agent", "text": text or "", "files": names, "at": now_ms()}
    updated = _update(b, sid, key, {"updatedAt": _moved(item)}, entry)
    return {"ok": True, "key": key, "updatedAt": updated["updatedAt"], "files": names}


def item_file(b: Poster, sid: str, key: str, name: str) -> Path:
    """A file kept on one of the session's items, by the name read_inbox lists."""
    _item(b, sid, key)
    if not isinstance(name, str) or not name or safe_name(name) != name:
        raise BadInput(f"invalid file name {str(name)[:60]!r}")
    path = files_dir(b, sid, key) / name
    if path.is_symlink() or not path.is_file():
        raise NotFound(f"item {key!r} has no file {name!r}", code="unknown_file")
    return path


# -- the web inbox's views ----------------------------------------------------------------


def _writer(entry: dict[str, Any] | None, statuses: dict[str, str]) -> str:
    """Who wrote ``entry`` as a member reads it: ``agent``, a name, or a former member."""
    if entry is None or entry.get("by") == "agent":
        return "agent"
    return str(entry_view(entry, statuses)["from"])


def order_items(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Open items first, then settled; newest update first within each."""
    return sorted(
        rows,
        key=lambda i: (i.get("status") != OPEN, -int(i.get("updatedAt") or 0), str(i["key"])),
    )


def workspace_items(b: Poster, workspace: str) -> dict[str, Any]:
    """Every item of every session started in ``workspace``: key, title, status,
    revision, updatedAt and who last wrote; open first, newest first."""
    check_session_id(workspace, "workspace")
    sessions = [s for s in b.store.sessions() if s.workspace == workspace]
    per_session = b.store.items_of_many([s.session for s in sessions])
    found = [(s, item) for s, items in zip(sessions, per_session, strict=True) for item in items]
    lasts = b.store.last_item_entries([(s.session, item["key"]) for s, item in found])
    statuses = _members(b, workspace)
    rows = []
    for (s, item), last in zip(found, lasts, strict=True):
        row = {f: item.get(f) for f in VIEW_FIELDS}
        row.update(session=s.session, handle=s.handle)
        row["lastBy"] = _writer(last, statuses)
        rows.append(row)
    return {"ok": True, "workspace": workspace, "items": order_items(rows)}


def item_detail(b: Poster, sid: str, key: str) -> dict[str, Any]:
    """One item with its whole thread, oldest first; each entry says who wrote it
    (``agent``, a member's name, or "a former member"), when, and its files."""
    info = b.session(sid)
    item = _item(b, sid, key)
    ws = item.get("workspace") or ""
    statuses = _members(b, ws) if ws else {}
    entries = b.store.item_thread(sid, key)
    thread = []
    for e in entries:
        view = entry_view(e, statuses)
        view.update(by=e.get("by", "member"), at=e.get("at"), **{"from": _writer(e, statuses)})
        thread.append(view)
    out = {f: item.get(f) for f in (*VIEW_FIELDS, "text", "workspace", "createdAt")}
    out.update(session=sid, handle=info.handle, thread=thread)
    return {"ok": True, "item": out}
