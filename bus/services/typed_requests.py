"""Typed request threads: ``inbox request`` and ``inbox decide``.

The rules are :mod:`bus.core.decisions` (pure); this module is the I/O around them. A
decision is computed in Python from the state read, then written by ``decide.lua`` only
if the thread is still in that state (compare-and-set), so of two parties deciding at
once exactly one wins; the other recomputes from the new state and is refused.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bus.core import decisions
from bus.core.errors import BadInput, NotFound, Refused
from bus.core.models import check_session_id, now_ms, parse_message
from bus.core.text import one_line
from bus.core.threads import thread_id
from bus.store.keys import is_thread_id

from .sessions import no_session

if TYPE_CHECKING:
    from bus.core.models import Message, SessionInfo
    from bus.store.store import Store

THREAD_LOG_MAX = 5000
# Compare-and-set attempts before giving up; each retry means another decision won, so
# the next read usually finds a terminal state and refuses.
MAX_ATTEMPTS = 5


def role_of(meta: dict[str, str], actor: str) -> str:
    """The actor's role in a typed thread: the original sender, the recipient, or other."""
    if actor == meta.get("origin"):
        return decisions.SENDER
    if actor == meta.get("recipient"):
        return decisions.RECIPIENT
    return decisions.OTHER


def _check_thread(thread: str) -> None:
    if not isinstance(thread, str) or not is_thread_id(thread):
        raise BadInput(f"invalid thread id {thread!r}")


class Requests:
    """Typed request threads on one store (a provider, called on use), with a session's
    lookup and the router's ``post``."""

    def __init__(
        self,
        store: Callable[[], Store],
        *,
        session: Callable[[str], SessionInfo],
        post: Callable[[Message], dict[str, Any]],
    ) -> None:
        self._store, self.session, self.post = store, session, post

    @property
    def store(self) -> Store:
        return self._store()

    def open_request(
        self,
        *,
        actor: str,
        to_id: str,
        type: str,
        text: str,
        windows: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Open a typed thread in REQUESTED and deliver its text to the recipient."""
        sender = self.session(check_session_id(actor, "actor session id"))
        self.session(check_session_id(to_id, "recipient session id"))
        if actor == to_id:
            raise BadInput("a request needs two parties; it cannot be addressed to its sender")
        if type not in decisions.THREAD_TYPES:
            raise BadInput(
                f"unknown thread type {type!r}: one of {', '.join(decisions.THREAD_TYPES)}"
            )
        wins = decisions.validate_windows("request", type, windows)
        thr = thread_id(to_id, f"request:{uuid.uuid4().hex}")
        # Validated before the thread exists, so a bad text leaves no orphan thread behind.
        msg = parse_message(
            {
                "from": sender.handle,
                "to_id": to_id,
                "from_session": actor,
                "text": text,
                "thread": thr,
                "class": "action",
            }
        )
        at = now_ms()
        # Setting ``key`` first makes the delivery's thread_append keep these fields (it only
        # initialises a thread whose meta has no key yet).
        self.store.items.open_request_thread(
            thr,
            {
                "key": f"request:{thr}",
                "label": f"{type} from {sender.handle}",
                "created": str(at),
                "parties": json.dumps([actor, to_id]),
                "senders": "[]",
                "type": type,
                "state": decisions.REQUESTED,
                "origin": actor,
                "recipient": to_id,
                "windows": json.dumps(wins),
            },
        )
        # The sender's own inbox lists the thread too, so `inbox threads` shows its state.
        self.store.items.list_thread(actor, thr, at)
        answer = self.post(msg)
        return {
            "ok": True,
            "thread": thr,
            "state": decisions.REQUESTED,
            "id": msg.id,
            "delivery": answer.get("state"),
        }

    def decide(
        self,
        thread: str,
        decision: str,
        *,
        actor: str,
        message: str | None = None,
        windows: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Act on a typed thread; answers ``{ok, envelope_id, new_state}``.

        Refusals (``not_a_party``, ``thread_terminal``, ``invalid_for_state``) raise
        :class:`Refused`, bad input raises :class:`BadInput`; either way nothing is written.
        """
        decisions.check_message(message)
        if decision not in decisions.DECISIONS:
            raise BadInput(
                f"unknown decision {decision!r}: one of {', '.join(decisions.DECISIONS)}"
            )
        check_session_id(actor, "actor session id")
        _check_thread(thread)
        info, meta = self.store.inbox.session_and_thread(actor, thread)
        if info is None:
            raise no_session(actor)
        if not meta.get("type") or not meta.get("state"):
            raise NotFound(f"no typed request thread {thread!r}", code="unknown_thread")
        wins = decisions.validate_windows(decision, meta["type"], windows)
        role = role_of(meta, actor)
        other = meta["recipient"] if role == decisions.SENDER else meta["origin"]
        env_id = f"env-{uuid.uuid4()}"
        text = message if message else decision
        for _ in range(MAX_ATTEMPTS):
            state, offered_by = meta["state"], meta.get("offered_by") or None
            res = decisions.transition(state, decision, role, offered_by)
            if not res.ok:
                why = decisions.why_refused(str(res.error), state, role, offered_by)
                raise Refused(
                    f"{decision} refused on {thread}: {res.error}: {why}",
                    code=str(res.error),
                    state=state,
                    allowed=list(decisions.allowed(state, role, offered_by)),
                )
            assert res.new_state is not None
            at = now_ms()
            envelope = {
                "v": 1,
                "id": env_id,
                "ts": at,
                "from": info.handle,
                "to_id": other,
                "from_session": actor,
                "text": text,
                "kind": "decision",
                "class": "action",
                "thread": thread,
                "decision": decision,
                "new_state": res.new_state,
                "windows": wins,
            }
            # A counter is the standing offer: its windows replace the thread's.
            store_windows = json.dumps(wins) if decision == "counter" else ""
            verdict = self.store.items.decide(
                thread,
                [
                    state,
                    offered_by or "",
                    res.new_state,
                    res.offered_by or "",
                    store_windows,
                    env_id,
                    json.dumps(envelope),
                    at,
                    info.handle,
                    one_line(f"{decision}: {text}", 120),
                    THREAD_LOG_MAX,
                ],
            )
            if verdict == "ok":
                break
            if verdict == "missing":
                raise NotFound(f"no typed request thread {thread!r}", code="unknown_thread")
            meta = self.store.inbox.thread_meta(
                thread
            )  # another decision won: recompute from what it left
        else:
            raise Refused(f"{thread} kept changing; try again", code="conflict")
        self.store.items.list_thread(actor, thread, at)
        note = f"{info.handle} decided {decision}"
        if message:
            note += f": {message}"
        # Same id as the envelope: the delivery finds it in the log already and only files it
        # in the other party's inbox, where a decision wakes (bus.core.policy).
        self.post(
            parse_message(
                {
                    "id": env_id,
                    "from": info.handle,
                    "to_id": other,
                    "from_session": actor,
                    "kind": "decision",
                    "thread": thread,
                    "text": note[:8000],
                    "class": "action",
                }
            )
        )
        return {"ok": True, "envelope_id": env_id, "new_state": res.new_state, "thread": thread}

    def request_state(self, thread: str) -> dict[str, Any]:
        """A typed thread's state, parties and standing windows (read-only)."""
        _check_thread(thread)
        meta = self.store.inbox.thread_meta(thread)
        if not meta.get("type"):
            raise NotFound(f"no typed request thread {thread!r}", code="unknown_thread")
        out: dict[str, Any] = {
            "thread": thread,
            "type": meta["type"],
            "state": meta.get("state"),
            "origin": meta.get("origin"),
            "recipient": meta.get("recipient"),
            "windows": json.loads(meta.get("windows") or "[]"),
        }
        if meta.get("offered_by"):
            out["offered_by"] = meta["offered_by"]
        return out
