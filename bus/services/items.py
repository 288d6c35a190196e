"""Items for members, with pictures (Luke's read_inbox / reply_inbox).

An agent session posts items under keys it chooses; members of its workspace settle them
and write on them; the agent replies. An item and its thread live in the owning session's
slot (``P:{sid}:items``, ``P:{sid}:item:<key>:thread``), so a reply's entry and its moved
``updatedAt`` are one script. Every check runs before the first write: a refused call
writes nothing, neither to Redis nor to disk.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bus.core.errors import BadInput, NotFound, RateLimited, Refused
from bus.core.item_views import VIEW_FIELDS, entry_view, inbox_view
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
from bus.core.threads import thread_id
from bus.local.private_files import private_dirs
from bus.store.keys import check_item_key
from bus.trust.rules import member_fold

from .pictures import Picture, read_pictures, safe_name, store_picture

if TYPE_CHECKING:
    from bus.core.models import Message
    from bus.core.settings import Settings
    from bus.store.store import Store

OPEN, SETTLED = "open", "settled"
MAX_TITLE = 200
MAX_TOPIC = 200


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


def _moved(item: dict[str, Any]) -> int:
    # updatedAt must visibly move even within the millisecond of the previous write.
    return max(now_ms(), int(item.get("updatedAt") or 0) + 1)


def _pictures(image_paths: Sequence[str | os.PathLike[str]], root: Path | str | None) -> list[Any]:
    paths = [os.fspath(p) for p in image_paths]
    if not paths:
        return []
    return read_pictures(paths, Path(root) if root is not None else Path.cwd())


# -- the web inbox's order ----------------------------------------------------------------


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


class Items:
    """Items and members on one store (a provider, called on use): a session's lookup
    and the router's ``post`` are what it needs besides."""

    def __init__(
        self,
        store: Callable[[], Store],
        settings: Settings,
        *,
        session: Callable[[str], SessionInfo],
        post: Callable[[Message], dict[str, Any]],
    ) -> None:
        self._store, self.settings, self.session, self.post = store, settings, session, post

    @property
    def store(self) -> Store:
        return self._store()

    # -- members ------------------------------------------------------------------------------

    def _members(self, workspace: str) -> dict[str, str]:
        return self.store.members.members(check_session_id(workspace, "workspace"))

    def member_status(self, workspace: str, name: str) -> str | None:
        """``active``, ``removed`` (the account is gone), or None (never a member)."""
        check_session_id(name, "member name")
        return self.store.members.member_status(check_session_id(workspace, "workspace"), name)

    def member_add(self, workspace: str, name: str) -> dict[str, Any]:
        """Add (or re-add) a member. A reserved workspace name, or a member whose handle
        ``workspace:name`` a live session already holds, is refused: two senders never
        share one name."""
        check_session_id(name, "member name")
        check_session_id(workspace, "workspace")
        if workspace in RESERVED_WORKSPACES:
            raise BadInput(f"workspace {workspace!r} is reserved", code="reserved_name")
        handle = f"{workspace}:{name}"
        if any(s.state != "closed" for s in self.store.sessions.sessions_by_handle(handle)):
            raise Refused(
                f"the handle {handle!r} is held by a session; close it before adding the member",
                code="handle_taken",
            )
        self.store.members.set_member(workspace, name, ACTIVE)
        # Its handle folded: a session may take no handle that reads as it (acme:Dean).
        self.store.members.index_member_fold(member_fold(workspace, name), workspace, name)
        return {"ok": True, "workspace": workspace, "member": name, "status": ACTIVE}

    def member_remove(self, workspace: str, name: str) -> dict[str, Any]:
        """The account is gone: a tombstone stays so past messages read "a former member",
        and every token issued to the member so far is dead for good (its generation moves
        on: re-adding the member does not revive them)."""
        if self.member_status(workspace, name) is None:
            raise NotFound(f"{name!r} is not a member of {workspace!r}", code="unknown_member")
        self.store.members.set_member(workspace, name, REMOVED)
        self.store.members.bump_member_generation(workspace, name)
        return {"ok": True, "workspace": workspace, "member": name, "status": REMOVED}

    def is_member(self, workspace: str, name: str) -> bool:
        return (
            workspace not in RESERVED_WORKSPACES and self.member_status(workspace, name) == ACTIVE
        )

    def _require_starter(self, info: SessionInfo, workspace: str | None) -> None:
        if not workspace or not info.starter or not self.is_member(workspace, info.starter):
            raise Refused(
                f"session {info.session}'s starter {info.starter!r} is not a member of "
                f"workspace {workspace!r}",
                code="starter_not_member",
            )

    def _require_member(self, workspace: str | None, member: str) -> None:
        check_session_id(member, "member name")
        if not workspace or not self.is_member(workspace, member):
            raise Refused(
                f"{member!r} is not a member of workspace {workspace!r}", code="not_a_member"
            )

    # -- items --------------------------------------------------------------------------------

    def files_dir(self, sid: str, key: str) -> Path:
        """Where an item's pictures are kept: ``$INBOX_HOME/items/<sid>/<key>/files/``."""
        check_session_id(sid)
        return Path(self.settings.home) / "items" / sid / check_item_key(key) / "files"

    def _item(self, sid: str, key: str) -> dict[str, Any]:
        """The session's own item under ``key``; another session's key is simply not here."""
        item = self.store.items.item(sid, check_item_key(key))
        if item is None:
            raise NotFound(f"session {sid} has no item {key!r}", code="unknown_item", key=key)
        return item

    def _update(
        self, sid: str, key: str, patch: dict[str, Any], entry: dict[str, Any] | None
    ) -> dict[str, Any]:
        out = self.store.items.update_item(sid, key, patch, entry)
        if out is None:
            raise NotFound(f"session {sid} has no item {key!r}", code="unknown_item", key=key)
        return out

    def _keep(self, sid: str, key: str, pictures: list[Picture]) -> list[str]:
        target = self.files_dir(sid, key)
        if not pictures:
            return []
        size = sum(p.size for p in pictures)
        cap = self.settings.max_picture_bytes
        if not self.store.items.take_picture_bytes(sid, size, cap):
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
            self.store.items.give_picture_bytes(sid, size)
            raise

    def item_post(
        self, sid: str, key: str, *, title: str, text: str | None = None
    ) -> dict[str, Any]:
        """Post an item; again under the same key it is the next revision, open again."""
        info = self.session(sid)
        check_item_key(key)
        if not isinstance(title, str) or not title.strip() or len(title) > MAX_TITLE:
            raise BadInput(f"title must be 1-{MAX_TITLE} characters")
        check_text(text)
        if not info.workspace:
            raise Refused(f"session {sid} belongs to no workspace", code="no_workspace")
        self._require_starter(info, info.workspace)
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
        return {"ok": True, "item": self.store.items.post_item(sid, key, item)}

    def item_settle(self, sid: str, key: str, *, member: str, answer: str) -> dict[str, Any]:
        """A member of the item's workspace settles it with an answer."""
        self.session(sid)
        item = self._item(sid, key)
        if not has_words(answer):
            raise BadInput("an answer must not be blank", code="empty_answer")
        check_text(answer, "answer")
        self._require_member(item.get("workspace"), member)
        at = _moved(item)
        patch = {"status": SETTLED, "answer": answer, "settledAt": at, "updatedAt": at}
        return {"ok": True, "item": self._update(sid, key, patch, None)}

    def item_write(
        self,
        sid: str,
        key: str,
        *,
        member: str,
        text: str | None = None,
        image_paths: Sequence[str | os.PathLike[str]] = (),
        root: Path | str | None = None,
    ) -> dict[str, Any]:
        """A member writes on an item (open or settled); the agent hears of it, woken."""
        self.session(sid)
        item = self._item(sid, key)
        check_text(text)
        workspace = item.get("workspace")
        self._require_member(workspace, member)
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
        names = self._keep(sid, key, pictures)
        entry = {
            "by": "member",
            "member": member,
            "text": text or "",
            "files": names,
            "at": now_ms(),
        }
        self._update(sid, key, {"updatedAt": _moved(item)}, entry)
        if pictures:
            refs = [
                p.ref().model_copy(update={"name": n}) for p, n in zip(pictures, names, strict=True)
            ]
            msg = msg.model_copy(update={"files": refs})
        # Its messages name the thread by id (the label would be that id): the item's key.
        self.store.items.label_thread(str(fields["thread"]), f"item {key}")
        answer = self.post(msg)
        return {
            "ok": True,
            "key": key,
            "files": names,
            "id": msg.id,
            "thread": answer.get("thread"),
        }

    def read_inbox(self, sid: str) -> dict[str, Any]:
        """Every item of the agent, newest update first, each with its thread oldest first."""
        self.session(sid)
        thread_of = partial(self.store.items.item_thread, sid)
        return {"items": inbox_view(self.store.items.items_of(sid), self._members, thread_of)}

    def reply_inbox(
        self,
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
        info = self.session(sid)
        check_item_key(key)
        check_text(text)
        item = self._item(sid, key)
        self._require_starter(info, item.get("workspace"))
        if not has_words(text) and not image_paths:
            raise BadInput("a reply needs words, pictures, or both", code="empty_reply")
        pictures = _pictures(image_paths, root)
        # Everything is checked: from here on the reply is written.
        names = self._keep(sid, key, pictures)
        entry = {"by": "agent", "text": text or "", "files": names, "at": now_ms()}
        updated = self._update(sid, key, {"updatedAt": _moved(item)}, entry)
        return {"ok": True, "key": key, "updatedAt": updated["updatedAt"], "files": names}

    def item_file(self, sid: str, key: str, name: str) -> Path:
        """A file kept on one of the session's items, by the name read_inbox lists."""
        self._item(sid, key)
        if not isinstance(name, str) or not name or safe_name(name) != name:
            raise BadInput(f"invalid file name {str(name)[:60]!r}")
        path = self.files_dir(sid, key) / name
        if path.is_symlink() or not path.is_file():
            raise NotFound(f"item {key!r} has no file {name!r}", code="unknown_file")
        return path

    # -- the web inbox's views ------------------------------------------------------

    def workspace_items(self, workspace: str) -> dict[str, Any]:
        """Every item of every session started in ``workspace``: key, title, status,
        revision, updatedAt and who last wrote; open first, newest first."""
        check_session_id(workspace, "workspace")
        sessions = [s for s in self.store.sessions.sessions() if s.workspace == workspace]
        per_session = self.store.items.items_of_many([s.session for s in sessions])
        found = [
            (s, item) for s, items in zip(sessions, per_session, strict=True) for item in items
        ]
        lasts = self.store.items.last_item_entries([(s.session, item["key"]) for s, item in found])
        statuses = self._members(workspace)
        rows = []
        for (s, item), last in zip(found, lasts, strict=True):
            row = {f: item.get(f) for f in VIEW_FIELDS}
            row.update(session=s.session, handle=s.handle)
            row["lastBy"] = _writer(last, statuses)
            rows.append(row)
        return {"ok": True, "workspace": workspace, "items": order_items(rows)}

    def item_detail(self, sid: str, key: str) -> dict[str, Any]:
        """One item with its whole thread, oldest first; each entry says who wrote it
        (``agent``, a member's name, or "a former member"), when, and its files."""
        info = self.session(sid)
        item = self._item(sid, key)
        ws = item.get("workspace") or ""
        statuses = self._members(ws) if ws else {}
        entries = self.store.items.item_thread(sid, key)
        thread = []
        for e in entries:
            view = entry_view(e, statuses)
            view.update(by=e.get("by", "member"), at=e.get("at"), **{"from": _writer(e, statuses)})
            thread.append(view)
        out = {f: item.get(f) for f in (*VIEW_FIELDS, "text", "workspace", "createdAt")}
        out.update(session=sid, handle=info.handle, thread=thread)
        return {"ok": True, "item": out}
