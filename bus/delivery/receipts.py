"""Delivery receipts and the outbox: the sender's side of a message.

A receipt is a small JSON per message beside its send answer, in its recipient's ``ids``
hash (field ``~<id>``; a bounced one, a hash ``P:{sid}:rc:<id>``: see
:mod:`bus.store.keys`), opened by the send's own append (``append.lua``; a batch's by
``append_many.lua``, a bounced one by ``receipt_open.lua`` in the same pipeline: no extra
round trip) and stamped by one call at each transition (``receipt_mark.lua``):
``stored → noticed → read → answered``, or a side exit ``withdrawn``, ``retracted``,
``bounced``, ``expired``. The sender's outbox (``P:{sid}:outbox``) lists what it sent.

The inbox's own records (marks, send answers) back the receipt up: a transition whose
receipt stamp was missed (a drain while Redis was down, a crash between a mark and its
stamp) still shows in the receipt's ``state``, without a time.

A recipient whose harness has not been seen (turn report, drain, listen, hook call, a
socket ack) for ``INBOX_STALE_S`` is ``stale``; messages no notice got in for
``INBOX_EXPIRE_S`` end ``expired`` (the scheduler's sweep), and the receipt says so.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from bus.core.errors import BadInput, NotFound, Unauthorized
from bus.core.models import MESSAGE_ID_PATTERN, Message, check_session_id, now_ms
from bus.core.receipt_rules import SENT_LIMIT_MAX as SENT_LIMIT_MAX
from bus.core.receipt_rules import (
    STATES,
    host_waits,
    is_reached,
    outbox_view,
    public,
    receipt_views,
)
from bus.store.keys import IDS_KEEP_MS
from bus.store.redis_errors import StoreFailed
from bus.trust.tokens import SCOPE_READ

if TYPE_CHECKING:
    from bus.core.settings import Settings
    from bus.store.store import Store
    from bus.trust.tokens import Claims

log = logging.getLogger(__name__)

WAITABLE = ("noticed", "read", "answered")
OUTBOX_MAX = 10_000
WAIT_CHUNK_S = 60.0  # one blocking read at most this long; the loop re-blocks, never polls
EXPIRE_EVERY_S = 60.0
# Sessions an expiry pass reads per round trip (due entries are taken between chunks).
EXPIRE_CHUNK = 200
_MESSAGE_ID_RE = re.compile(MESSAGE_ID_PATTERN)

# -- pure rules -----------------------------------------------------------------------------


def receipt_ttl_ms(expire_s: float) -> int:
    """How long a receipt lives after its last transition: it must outlive its message's
    expiry, so the sender can read "expired" (8 days by default)."""
    return max(IDS_KEEP_MS, int(expire_s * 1000) + 86400 * 1000)


def check_message_id(msg_id: object) -> str:
    """A message id, before it becomes part of a key."""
    if not isinstance(msg_id, str) or not _MESSAGE_ID_RE.fullmatch(msg_id):
        raise BadInput(f"invalid message id {repr(msg_id)[:60]}: must match {MESSAGE_ID_PATTERN}")
    return msg_id


# -- the store side ---------------------------------------------------------------------------


class Receipts:
    """Receipts and outboxes on one store; ``claims`` verifies a caller's token (the
    facade's own check), ``store`` is called on use (a provider, connected lazily)."""

    def __init__(
        self,
        store: Callable[[], Store],
        settings: Settings,
        claims: Callable[..., Claims | None],
    ) -> None:
        self._store, self.settings, self.claims = store, settings, claims
        self._clock = threading.Lock()
        self._last_us = 0

    @property
    def store(self) -> Store:
        return self._store()

    @property
    def ttl_ms(self) -> int:
        return receipt_ttl_ms(self.settings.expire_s)

    # -- writing ------------------------------------------------------------------------------

    def open(
        self,
        pipe: Any,
        msg: Message,
        to: str,
        thread: str | None,
        *,
        state: str = "stored",
        reason: str = "",
    ) -> None:
        """Queue the receipt's opening and the sender's outbox entry on ``pipe`` (after the
        append): no round trip of its own."""
        self.open_many(pipe, [(msg, to, thread, state, reason)])

    def open_many(
        self,
        pipe: Any,
        rows: Sequence[tuple[Message, str, str | None, str, str]],
        *,
        appended: bool = False,
    ) -> None:
        """:meth:`open` for many ``(message, to, thread, state, reason)``, in the order sent:
        one ``receipt_open.lua`` call per recipient, one outbox write per sender. With
        ``appended``, the ``stored`` rows' receipts were opened by their append
        (``append_many.lua``): only their outbox entries are written here."""
        store, now = self.store, now_ms()
        by_to: dict[str, list[tuple[str, list[Any]]]] = {}
        outboxes: dict[str, dict[str, int]] = {}
        for msg, to, thread, state, reason in rows:
            if not (appended and state == "stored"):
                by_to.setdefault(to, []).append(
                    (msg.id, [state, msg.from_, msg.from_session or "", thread or "", reason])
                )
            if msg.from_session:
                members = outboxes.setdefault(msg.from_session, {})
                members.setdefault(f"{to}|{msg.id}", self._tick())
        for to, opened in by_to.items():
            store.receipts.open_receipts(to, opened, now, self.ttl_ms, pipeline=pipe)
        for sender, members in outboxes.items():
            floor = max(members.values()) - IDS_KEEP_MS * 1000
            store.receipts.queue_outbox_add(pipe, sender, members, OUTBOX_MAX, floor)

    def _tick(self) -> int:
        """Microseconds, strictly increasing in this process: a burst (or a batch) from one
        sender still lists in the order it was sent."""
        with self._clock:
            self._last_us = max(time.time_ns() // 1000, self._last_us + 1)
            return self._last_us

    def bounced(self, msg: Message, to: str, reason: str) -> None:
        """A send to no registered session: the receipt (and the outbox) say so."""
        store = self.store
        pipe = store.pipeline()
        store.receipts.index_recipients([(msg.id, to)], now_ms(), pipeline=pipe)
        self.open(pipe, msg, to, None, state="bounced", reason=reason)
        pipe.execute()

    def unlist_refused(self, refused: Sequence[tuple[Message, str]]) -> None:
        """Messages the append refused (``inbox_full``) leave no outbox entry, unless an
        earlier bounce of the same id opened a receipt the entry shows. Only on a refusal,
        so the send's own path keeps its single round trip."""
        rows = [(m, to) for m, to in refused if m.from_session]
        if not rows:
            return
        store = self.store
        found = store.receipts.receipts_exist([(to, msg.id) for msg, to in rows])
        store.receipts.outbox_remove(
            [
                (msg.from_session or "", to, msg.id)
                for (msg, to), kept in zip(rows, found, strict=True)
                if not kept
            ]
        )

    def mark(
        self,
        sid: str,
        state: str,
        ids: Iterable[str],
        *,
        touch: bool = False,
        client: Any = None,
    ) -> None:
        """Stamp ``state`` on the receipts of ``ids`` (messages addressed to ``sid``); with
        ``touch``, the session's harness was also seen now. One script, one round trip."""
        ids = list(ids)
        if not ids and not touch:
            return
        self.store.receipts.mark_receipts(
            sid, state, ids, now_ms(), self.ttl_ms, touch=touch, pipeline=client
        )

    def seen(self, sid: str) -> None:
        """The session's harness was seen now (``last_seen``)."""
        self.mark(sid, "", [], touch=True)

    def replied(self, sid: str, thread: str, last: str, ids: list[str]) -> None:
        """``sid`` replied into ``thread``: the messages it got there count as read. Only
        those past the thread's cursor for ``sid`` are looked at (its earlier replies
        marked the rest), so a reply costs the same in a long thread as in a short one:
        ``last`` and ``ids`` as ``thread_tail.lua`` answers them
        (:meth:`~bus.store.conversations.ConversationStore.reply_reads`). The cursor moves
        once the marks are stamped."""
        self.mark(sid, "read", [i for i in ids if _MESSAGE_ID_RE.fullmatch(i)], touch=True)
        if last:
            self.store.receipts.move_reply_cursor(thread, sid, last)

    def heartbeat(self, sid: str) -> threading.Event:
        """Keep ``sid`` seen while a listener runs (a daemon thread); set the event to stop."""
        stop = threading.Event()
        every = max(1.0, min(60.0, self.settings.stale_s / 3))

        def beat() -> None:
            while not stop.is_set():
                try:
                    self.seen(sid)
                except StoreFailed as exc:
                    log.debug("last_seen for %s not recorded: %s", sid, exc)
                stop.wait(every)

        threading.Thread(target=beat, name=f"seen-{sid}", daemon=True).start()
        return stop

    # -- reading ------------------------------------------------------------------------------

    def _read(self, rows: list[tuple[str, str]]) -> list[dict[str, Any] | None]:
        """Receipts of ``(recipient, id)`` rows with the records behind them, one round trip
        (every key of one row is in its recipient's slot)."""
        got = self.store.receipts.receipt_rows(rows)
        now = now_ms()
        views = receipt_views(got, rows, now, self.settings.stale_s)
        return host_waits(views, self.store.schedule.beats_at, now, self.settings.host_down_s)

    def _caller(self, by: str | None, token: str | None) -> tuple[str | None, str | None]:
        """Who asks: ``(session, None)`` or, for a member's token, ``(None, handle)``."""
        claims = self.claims(token, SCOPE_READ)
        if claims is not None:
            if claims.sub_kind == "session":
                if by not in (None, claims.sub):
                    raise Unauthorized(
                        f"the token is {claims.actor}'s, not {by!r}'s", code="token_subject"
                    )
                return claims.sub, None
            workspace, _, name = claims.sub.partition("/")
            return None, f"{workspace}:{name}"
        sid = by or self.settings.session
        if not sid:
            raise BadInput(
                "no caller session: pass --by SID or set INBOX_SESSION", code="no_session"
            )
        return check_session_id(sid), None

    def receipt(
        self,
        msg_id: str,
        *,
        by: str | None = None,
        token: str | None = None,
        wait_for: str | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """One message's receipt, for its sender only; with ``wait_for``, block until the
        message reaches that state (or a side exit), or ``timeout`` seconds."""
        check_message_id(msg_id)
        if wait_for is not None and wait_for not in WAITABLE:
            raise BadInput(f"--wait-for must be one of {', '.join(WAITABLE)}, not {wait_for!r}")
        if timeout is not None and timeout < 0:
            raise BadInput("timeout must be 0 or more seconds")
        me, handle = self._caller(by, token)
        to = self.store.queue.recipient_of(msg_id)
        found = self._read([(to, msg_id)])[0] if to else None
        sender = found["_from_session"] if found else None
        if found is None or (
            (me is None or sender != me) and (handle is None or sender or found["_from"] != handle)
        ):
            # One answer for an unknown id and another sender's: a receipt is no way to
            # learn which ids exist.
            raise NotFound(
                f"no receipt of yours for message {msg_id!r} (unknown, older than 7 days, "
                "or sent by someone else: only its sender reads a receipt)"
            )
        if wait_for is not None:
            found = self._wait(to or "", msg_id, found, wait_for, timeout)
        return public(found)

    def _wait(
        self, to: str, msg_id: str, found: dict[str, Any], want: str, timeout: float | None
    ) -> dict[str, Any]:
        """Block on the recipient's events stream (every transition writes a record there)
        and look again after each; no polling."""
        store = self.store
        cursor = store.events.last_event_id(to)
        found = self._read([(to, msg_id)])[0] or found  # after the cursor: nothing missed
        deadline = None if timeout is None else time.monotonic() + timeout
        conn, pool = store.events.waiting_client(WAIT_CHUNK_S, f"inbox-wait:{msg_id}")
        try:
            while not is_reached(found["state"], want):
                left = WAIT_CHUNK_S if deadline is None else deadline - time.monotonic()
                if left <= 0:
                    return {
                        **found,
                        "ok": False,
                        "error": "timeout",
                        "message": f"{msg_id} did not reach {want} within {timeout}s; "
                        f"it is {found['state']}",
                    }
                block_ms = max(1, int(min(left, WAIT_CHUNK_S) * 1000))
                cursor = store.events.wait_events(conn, to, cursor, block_ms) or cursor
                found = self._read([(to, msg_id)])[0] or found
        finally:
            if pool is not None:
                pool.disconnect()
        return found

    def sent(
        self,
        sid: str,
        *,
        state: str | None = None,
        limit: int = 50,
        token: str | None = None,
    ) -> dict[str, Any]:
        """``sid``'s sent messages, newest first, each with its receipt; ``state`` filters."""
        check_session_id(sid)
        if state is not None and state not in STATES:
            raise BadInput(f"--state must be one of {', '.join(STATES)}, not {state!r}")
        if not 1 <= limit <= SENT_LIMIT_MAX:
            raise BadInput(f"--limit must be 1 to {SENT_LIMIT_MAX}, not {limit}")
        claims = self.claims(token, SCOPE_READ, session=sid)
        if claims is not None and claims.sub_kind != "session":
            raise Unauthorized(
                f"the token is {claims.actor}'s, not a session's", code="token_subject"
            )
        store = self.store
        rows = outbox_view(
            limit,
            state,
            lambda start, count: store.inbox.outbox_page(sid, start, count),
            self._read,
            lambda gone: store.inbox.drop_from_outbox(sid, gone),
        )
        return {"ok": True, "session": sid, "sent": rows}

    # -- expiry -------------------------------------------------------------------------------

    def expire(self, sid: str) -> list[str]:
        """Messages to ``sid`` no notice got in for ``expire_s`` end ``expired``."""
        store = self.store
        cutoff = now_ms() - int(self.settings.expire_s * 1000)
        ids = store.receipts.expire_unnoticed(sid, cutoff, now_ms())
        self.mark(sid, "expired", ids)
        return ids

    def expire_all(
        self, *, force: bool = False, between: Callable[[], object] | None = None
    ) -> int:
        """The scheduler's sweep: expire in every session that may hold old unnoticed
        messages (one round trip per :data:`EXPIRE_CHUNK` sessions to find them). At most
        once a minute across every process (the interval is claimed in Redis, as the
        backlog sweep's is) unless ``force``. ``between`` runs after each chunk (the
        scheduler takes due entries there: a large registry's pass does not hold up the
        wakes due meanwhile)."""
        store = self.store
        if not force and not store.schedule.claim_sweep(int(EXPIRE_EVERY_S * 1000), what="expiry"):
            return 0
        sids = store.sessions.session_ids()
        cutoff = now_ms() - int(self.settings.expire_s * 1000)
        expired = 0
        for i in range(0, len(sids), EXPIRE_CHUNK):
            chunk = sids[i : i + EXPIRE_CHUNK]
            for sid, due in zip(chunk, store.receipts.may_expire(chunk, cutoff), strict=True):
                if due:
                    expired += len(self.expire(sid))
            if between is not None:
                between()
        return expired
