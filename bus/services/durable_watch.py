"""Durable subscriptions: a coordinator follows sessions (its lanes, a list, or all)
under a name, and a restart resumes where it stopped, nothing missed, nothing repeated.

What is followed is each session's ``events`` stream (``P:{sid}:events``): the send
script writes an ``inbox_received`` record there with every message it stores, so a
message is seen as soon as it is stored, whether or not its host's worker runs. The
subscription's cursor is kept per session in that session's slot (``P:{sid}:subs``:
name → the last events id taken), moved after each message the caller took (an event
is handed over, then its cursor is written before the next is read). While a cursor is
there, the compaction pass keeps the session's events (``events_quiet.lua``); they stay
bounded (``MAXLEN ~ 10000`` records, some 2,000 messages). A cursor whose next records
were trimmed away is refused with ``cursor_expired`` (:class:`CursorExpired`) instead of
silently skipping them; ``reset`` starts the subscription again from now.

Where a cursor starts: a session followed for the first time starts at its newest
record (only what comes after), unless it was opened after the subscription was made
(a lane started later): then from its first record. A session's lanes are the sessions
it started (``session open --parent``) and those it gave work to (its ``gave`` set),
looked up again every ``refresh_s`` so new lanes are followed as they come.

A reader's own subscription (MCP, the gateway: :func:`reader_subscription`) sees in full
only itself and the sessions it started (their opener named it ``parent``). A session it
merely gave work to (its first message made it the delegator) is the receiver's, not
the reader's: of that session's messages the reader is handed only those it sent itself
(:func:`visible`), never another sender's body.

Subscriptions do not pin a session's events for ever: each cursor carries the time of
its last use, and the compaction pass drops the events of a quiet session whose cursors
were all idle ``INBOX_SUB_IDLE_S`` (``events_quiet.lua``); a reader holds at most
``INBOX_SUB_MAX`` subscriptions, its idle ones forgotten (``sub_claim.lua``).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from bus.core.errors import BadInput, NotFound, Refused, Unauthorized
from bus.core.models import check_session_id, now_ms
from bus.core.settings import SUB_IDLE_S
from bus.store.cluster import Poll
from bus.store.many import stream_id_after
from bus.store.subscriptions import GONE
from bus.trust.tokens import SCOPE_READ

if TYPE_CHECKING:
    from bus.store.store import Store
    from bus.trust.tokens import Claims

MESSAGE_KIND = "inbox_received"
# The caller's verified claims for a token and a scope (bus.trust.access.Access.claims).
ClaimsOf = Callable[[str | None, str], "Claims | None"]
STREAM_ID = re.compile(r"[0-9]{1,20}-[0-9]{1,20}")


class CursorExpired(Refused):
    """A durable subscription's cursor points before records that were trimmed away."""

    code = "cursor_expired"


def lanes(store: Store, sid: str) -> list[str]:
    """The sessions ``sid`` started (their ``parent``) or gave work to, sorted."""
    check_session_id(sid)
    # From the parent's lanes index (bus.store.many.lanes_of): a watch looks its lanes up
    # every few seconds, and reading every session's parent grew with the bus.
    return sorted(set(store.sessions.lanes_of(sid)) | set(store.sessions.gave_to(sid)))


def visible(reader: str | None, full: set[str], sid: str, message: dict[str, Any]) -> bool:
    """Whether a reader's subscription hands over ``message``, stored for session ``sid``:
    every message of a session in ``full`` (the reader itself, the sessions it started);
    of any other session's (one it gave work to), only the reader's own. No reader (an
    operator's ``inbox watch``): everything. Pure."""
    return reader is None or sid in full or message.get("from_session") == reader


def resolve(
    store: Store, sessions: list[str] | None, lanes_of: list[str] | None, follow_all: bool
) -> list[str]:
    """The sessions a selection names now: ``sessions``, the lanes of each of ``lanes_of``,
    or every registered session (``follow_all``)."""
    if follow_all:
        return store.sessions.session_ids()
    out = {check_session_id(sid) for sid in sessions or []}
    for owner in lanes_of or []:
        out.update(lanes(store, owner))
    return sorted(out)


def expired(cursor: str, bounds: dict[str, Any] | None, cursor_kept: bool) -> bool:
    """Whether records after ``cursor`` were trimmed: the stream's newest trimmed id is
    past it (Redis 7), or, where the server does not say (6.2), the cursor's own record
    is gone and the stream now starts after it. Pure."""
    if bounds is None or cursor == "0-0":
        return False
    deleted = bounds.get("max_deleted") or "0-0"
    if deleted != "0-0":
        return stream_id_after(deleted, cursor)
    first = bounds.get("first")
    return not cursor_kept and first is not None and stream_id_after(first, cursor)


class Durable:
    """A named subscription's positions on ``store``; iterating reads on (on ``blocking``,
    a client that may block) and moves its cursors."""

    def __init__(
        self,
        store: Store,
        blocking: Any,
        name: str,
        *,
        sessions: list[str] | None = None,
        lanes_of: list[str] | None = None,
        follow_all: bool = False,
        block_ms: int = 1000,
        stop: threading.Event | None = None,
        refresh_s: float = 3.0,
        count: int = 500,
        reset: bool = False,
        reader: str | None = None,
        idle_ms: int = 0,
    ) -> None:
        if block_ms <= 0:
            raise ValueError("block_ms must be positive (0 would block forever)")
        self.store, self.blocking = store, blocking
        self.name = name
        # A reader's own subscription: what it sees in full (itself and the sessions it
        # started, looked up again with the lanes); None: an operator's, everything.
        self.reader = reader
        self.full: set[str] = set()
        self.idle_ms = idle_ms
        self._touched = time.monotonic()
        self.selection = (sessions, lanes_of, follow_all)
        self.block_ms = block_ms
        self.stop = stop or threading.Event()
        self.refresh_s = refresh_s
        self.count = count
        self.pos: dict[str, str] = {}  # session id -> the last events id read
        self.poll = Poll()  # the wait between reads on a cluster, kept across them
        self._acked: dict[str, str] = {}
        self.store.events.check_sub_name(name)  # checked before anything is written
        for owner in lanes_of or []:
            if self.store.sessions.get_session(check_session_id(owner)) is None:
                raise NotFound(f"no session {owner!r} is registered", session=owner)
        if reset:
            self.store.events.sub_reset(name, resolve(self.store, *self.selection))
        self.created = self.store.events.sub_open(name, now_ms(), idle_ms)
        self.follow(resolve(self.store, *self.selection))

    def follow(self, sids: list[str]) -> None:
        """Take ``sids`` in (those not yet followed): their cursors, checked, or new ones."""
        if self.reader is not None:
            self.full = {self.reader, *self.store.sessions.lanes_of(self.reader)}
        fresh = [sid for sid in sids if sid not in self.pos]
        if not fresh:
            return
        cursors = self.store.events.sub_cursors(self.name, fresh)
        started: dict[str, str] = {}
        for sid in fresh:
            cursor = cursors[sid]
            if cursor is None:
                info = self.store.sessions.get_session(sid)
                late = info is not None and info.opened_at >= self.created
                cursor = "0-0" if late else self.store.events.last_event_id(sid)
            else:
                self._check(sid, cursor)
            # Written back either way: a cursor's time of use moves (an idle one keeps
            # the session's events no longer, events_quiet.lua).
            started[sid] = cursor
            self.pos[sid] = cursor
        self.store.events.sub_commit(self.name, started)
        self._touched = time.monotonic()

    def touch(self) -> None:
        """Mark every cursor used now (a subscription that reads on but takes nothing
        still keeps what it follows), once a quarter of ``idle_ms`` at most."""
        if not self.idle_ms or time.monotonic() - self._touched < self.idle_ms / 4000:
            return
        self._touched = time.monotonic()
        self.store.events.sub_commit(self.name, dict(self.pos))
        self.store.events.sub_open(self.name, now_ms(), self.idle_ms)

    def commit(self, cursors: dict[str, str]) -> None:
        """Move the cursors of sessions this subscription follows (``poll``'s second
        value); a session it does not follow is refused, nothing moved."""
        for sid, cursor in cursors.items():
            if check_session_id(sid) not in self.pos:
                raise Refused(f"subscription {self.name!r} does not follow {sid!r}")
            if not isinstance(cursor, str) or not STREAM_ID.fullmatch(cursor):
                raise BadInput(f"cursor {str(cursor)[:40]!r} of {sid!r} is not a stream id")
        self.store.events.sub_commit(self.name, {sid: str(c) for sid, c in cursors.items()})
        for sid, c in cursors.items():
            self.pos[sid] = str(c)

    def lanes_of_selection(self) -> bool:
        """Whether the selection grows (lanes or all): looked up again before a read."""
        return bool(self.selection[1] or self.selection[2])

    def ack(self, event: dict[str, Any]) -> None:
        """The caller has done with ``event`` (printed it, stored it): its cursor moves
        now. Without it the cursor moves when the next event is asked for; an event
        handed over but neither acknowledged nor followed by another comes again after
        a restart (never lost)."""
        sid, eid = str(event["session"]), str(event["stream_id"])
        self.store.events.sub_commit(self.name, {sid: eid})
        self._acked[sid] = eid

    def _check(self, sid: str, cursor: str) -> None:
        gone = cursor == GONE  # its records dropped while it was unused (events_quiet.lua)
        if not gone:
            bounds = self.store.events.events_bounds(sid)
            kept = bool(bounds) and self.store.events.has_event(sid, cursor)
            gone = expired(cursor, bounds, kept)
        if gone:
            raise CursorExpired(
                f"subscription {self.name!r} fell out of retention for session {sid!r}: "
                f"records after {cursor} were trimmed away, so messages may have been missed; "
                "start it again from now with --reset",
                subscription=self.name,
                session=sid,
                cursor=cursor,
            )

    def _message(self, sid: str, fields: dict[str, str]) -> dict[str, Any]:
        msg_id = fields.get("id", "")
        recs = self.store.inbox.records(sid, [msg_id]) if msg_id else []
        if recs and isinstance(recs[0].get("m"), dict):
            return dict(recs[0]["m"])
        queued = self.store.queue.queued_message(sid, msg_id) if msg_id else None
        if queued and "m" in queued:
            try:
                return dict(json.loads(queued["m"]))
            except ValueError:
                pass
        return {"id": msg_id, "thread": fields.get("thread")}

    def __iter__(self) -> Iterator[dict[str, Any]]:
        next_refresh = time.monotonic() + self.refresh_s
        sessions, lanes_of, follow_all = self.selection
        while not self.stop.is_set():
            if (lanes_of or follow_all) and time.monotonic() >= next_refresh:
                self.follow(resolve(self.store, sessions, lanes_of, follow_all))
                next_refresh = time.monotonic() + self.refresh_s
            if not self.pos:
                self.stop.wait(self.block_ms / 1000)
                continue
            self.touch()
            rows = self.store.events.read_session_streams(
                self.blocking,
                dict(self.pos),
                stream="events",
                count=self.count,
                block_ms=self.block_ms,
                stop=self.stop,
                poll=self.poll,
            )
            moved: dict[str, str] = {}
            for sid, entries in rows:
                for eid, fields in entries:
                    self.pos[sid] = moved[sid] = str(eid)
                    if fields.get("kind") != MESSAGE_KIND:
                        continue
                    message = self._message(sid, fields)
                    if not visible(self.reader, self.full, sid, message):
                        continue
                    yield {
                        "session": sid,
                        "stream_id": str(eid),
                        "message": message,
                        "subscription": self.name,
                    }
                    # The caller asked for the next: this one's cursor moves first (ack
                    # moved it already where the caller acknowledged it).
                    eid_done = moved.pop(sid)
                    if self._acked.get(sid) != eid_done:
                        self.store.events.sub_commit(self.name, {sid: eid_done})
                    if self.stop.is_set():
                        return
            self.store.events.sub_commit(self.name, moved)


# -- the reader's trust (MCP, the gateway) ---------------------------------------------


def reader_of(claims_of: ClaimsOf, token: str | None, by: str | None) -> str:
    """Who reads: the token's session (authentication on; read scope), else ``by``."""
    claims = claims_of(token, SCOPE_READ)
    if claims is not None:
        if claims.sub_kind != "session":
            raise Unauthorized(
                f"the token is {claims.actor}'s, not a session's", code="token_subject"
            )
        return str(claims.sub)
    if not by:
        raise BadInput("name the reading session: by=SID", code="no_session")
    return check_session_id(by)


def check_readable(store: Store, reader: str, sessions: list[str], lanes_of: list[str]) -> None:
    """A reader follows itself and its own lanes only (the sessions it started or gave
    work to): anything else is refused, nothing is read. Of a session it only gave work
    to it is handed its own messages only (:func:`visible`)."""
    for owner in lanes_of:
        if owner != reader:
            raise Refused(
                f"{reader!r} may follow its own lanes, not those of {owner!r}",
                code="not_your_lane",
            )
    allowed = {reader, *lanes(store, reader)}
    for sid in sessions:
        if check_session_id(sid) not in allowed:
            raise Refused(
                f"{sid!r} is not {reader!r} nor one of its lanes (the sessions it started "
                "or gave work to)",
                code="not_your_lane",
            )


def poll(
    sub: Durable, *, max_events: int, wait_ms: int
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """One read of ``sub``: up to ``max_events`` messages that came (waiting up to
    ``wait_ms`` for the first), and the cursors past them (and past the other records
    read up to them) for the caller to commit once it took them (:meth:`commit`); a
    call that does not commit gets the same messages again next time."""
    if sub.lanes_of_selection():
        sub.follow(resolve(sub.store, *sub.selection))
    rows = sub.store.events.read_session_streams(
        sub.blocking,
        dict(sub.pos),
        stream="events",
        count=max_events,
        block_ms=max(1, wait_ms),
        stop=sub.stop,
    )
    out: list[dict[str, Any]] = []
    last: dict[str, str] = {}
    for sid, entries in rows:
        for eid, fields in entries:
            if len(out) >= max_events:
                return out, last
            last[sid] = str(eid)
            if fields.get("kind") != MESSAGE_KIND:
                continue
            message = sub._message(sid, fields)
            if visible(sub.reader, sub.full, sid, message):
                out.append(
                    {
                        "session": sid,
                        "stream_id": str(eid),
                        "message": message,
                        "subscription": sub.name,
                    }
                )
    return out, last


def reader_subscription(
    store: Store,
    blocking: Any,
    reader: str,
    name: str,
    *,
    sessions: list[str] | None,
    lanes: bool,
    reset: bool = False,
    block_ms: int = 1000,
    stop: threading.Event | None = None,
    most: int = 16,
    idle_s: float = SUB_IDLE_S,
) -> Durable:
    """A reader's own durable subscription (MCP, the gateway): its name is kept under the
    reader's (``<reader>/<name>``, bus.store.keys.Keys.reader_sub), it follows only what
    the reader may read (itself and its lanes, :func:`check_readable`; of a lane it only
    gave work to, its own messages, :func:`visible`), and ``lanes`` adds the reader's
    lanes as they come. A reader holds at most ``most`` subscriptions used within
    ``idle_s`` seconds: another new name is refused ``too_many_subscriptions``."""
    stored_name = store.k.reader_sub(reader, name)
    owners = [reader] if lanes else []
    check_readable(store, reader, sessions or [], owners)
    if not sessions and not owners:
        raise BadInput("follow sessions, your lanes, or both")
    idle_ms = int(idle_s * 1000)
    if not store.events.sub_claim(reader, name, now_ms(), idle_ms, most):
        raise Refused(
            f"{reader!r} already has {most} subscriptions in use (the most a reader "
            f"holds, INBOX_SUB_MAX); reuse a name, or wait: one unused for "
            f"{idle_s:g} s (INBOX_SUB_IDLE_S) is forgotten",
            code="too_many_subscriptions",
        )
    return Durable(
        store,
        blocking,
        stored_name,
        sessions=sessions or [],
        lanes_of=owners,
        reset=reset,
        block_ms=block_ms,
        stop=stop,
        reader=reader,
        idle_ms=idle_ms,
    )
