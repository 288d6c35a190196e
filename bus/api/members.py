"""The facade's member side: typed requests, members, items and the coordinator's watch.

A part of :class:`bus.api.facade.Bus`: each call checks who may act
(:mod:`bus.trust.access`), then calls the service that does it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from bus.store.redis_errors import translate_redis_errors
from bus.trust.tokens import SCOPE_READ, SCOPE_WRITE

from .parts import Parts


@translate_redis_errors
class Members(Parts):
    """Typed requests, members, items, sign-in links and live streams."""

    # -- typed requests and items --------------------------------

    def request(
        self,
        to_id: str,
        type: str,
        text: str,
        *,
        actor: str | None = None,
        windows: list[dict[str, Any]] | None = None,
        token: str | None = None,
    ) -> dict[str, Any]:
        """Open a typed request thread (``REQUESTED``) from ``actor`` to ``to_id``; it
        spends from the actor's send bucket."""
        sid = self.access.actor(actor, token)
        self.limit_sender(self.access.bucket_of(sid))
        return self.requests.open_request(
            actor=sid,
            to_id=to_id,
            type=type,
            text=text,
            windows=windows,
        )

    def decide(
        self,
        thread: str,
        decision: str,
        *,
        actor: str | None = None,
        message: str | None = None,
        windows: list[dict[str, Any]] | None = None,
        token: str | None = None,
    ) -> dict[str, Any]:
        """Act on a typed thread; answers ``{ok, envelope_id, new_state}`` or raises Refused.

        The actor is the token's subject when authentication is on, never a body field.
        """
        return self.requests.decide(
            thread,
            decision,
            actor=self.access.actor(actor, token),
            message=message,
            windows=windows,
        )

    def member_add(self, workspace: str, name: str) -> dict[str, Any]:
        return self.items.member_add(workspace, name)

    def member_remove(self, workspace: str, name: str) -> dict[str, Any]:
        """The member's account is gone; their messages show as "a former member"."""
        return self.items.member_remove(workspace, name)

    def item_post(
        self,
        sid: str,
        key: str,
        *,
        title: str,
        text: str | None = None,
        token: str | None = None,
    ) -> dict[str, Any]:
        """Post (or re-post: a new revision) an item for the members of ``sid``'s workspace;
        it spends from the session's send bucket."""
        claims = self.claims(token, SCOPE_WRITE, session=sid)
        self.limit_sender(claims.actor if claims else sid)
        return self.items.item_post(sid, key, title=title, text=text)

    def item_settle(
        self, sid: str, key: str, *, member: str, answer: str, token: str | None = None
    ) -> dict[str, Any]:
        """A member settles an item with an answer."""
        self.access.as_member(token, sid, member)
        return self.items.item_settle(sid, key, member=member, answer=answer)

    def item_write(
        self,
        sid: str,
        key: str,
        *,
        member: str,
        text: str | None = None,
        image_paths: Sequence[str] = (),
        root: Path | None = None,
        token: str | None = None,
    ) -> dict[str, Any]:
        """A member writes on an item; it reaches the agent as a notice and wakes it. It
        spends from the member's send bucket."""
        self.limit_sender(self.access.as_member(token, sid, member))
        return self.items.item_write(
            sid, key, member=member, text=text, image_paths=image_paths, root=root
        )

    def read_inbox(self, sid: str, *, token: str | None = None) -> dict[str, Any]:
        """Luke's ``read_inbox``: every item with its thread, oldest first."""
        self.access.items_claims(token, SCOPE_READ, sid)
        return self.items.read_inbox(sid)

    def reply_inbox(
        self,
        sid: str,
        key: str,
        *,
        text: str | None = None,
        image_paths: Sequence[str] = (),
        root: Path | None = None,
        token: str | None = None,
    ) -> dict[str, Any]:
        """Luke's ``reply_inbox``: words and/or up to 4 pictures on one of the agent's items
        (the session's own answer: no send bucket; its pictures count against the
        session's ``INBOX_MAX_PICTURE_BYTES``)."""
        self.claims(token, SCOPE_WRITE, session=sid)
        return self.items.reply_inbox(sid, key, text=text, image_paths=image_paths, root=root)

    def item_file(self, sid: str, key: str, name: str) -> Path:
        return self.items.item_file(sid, key, name)

    def workspace_items(self, workspace: str) -> dict[str, Any]:
        """Every item of the workspace's sessions, open first, newest first (the web inbox)."""
        return self.items.workspace_items(workspace)

    def item_detail(self, sid: str, key: str) -> dict[str, Any]:
        """One item with its whole thread (the web inbox's item page)."""
        return self.items.item_detail(sid, key)

    def member_link(self, member: str, *, ttl_s: int | None = None) -> dict[str, Any]:
        """A sign-in link to the web inbox for an active member ``WORKSPACE/NAME``."""
        return self.links.member_link(member, ttl_s=ttl_s)

    def subscribe(
        self, sessions: str | list[str] | None = None, **kw: Any
    ) -> Iterator[dict[str, Any]]:
        """Follow sessions' streams live (blocking XREAD); None follows all. See bus.services.watch."""
        return self.watch.subscribe([sessions] if isinstance(sessions, str) else sessions, **kw)
