"""Who may wake an idle session, and what the host worker does next.

Pure: every fact, including the time, is passed in, so the rules are table-tested and
the worker, the scheduler and the tests all read the same code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from .errors import BadInput
from .models import ACTIVE, CLASS_ALIASES, SessionInfo, check_session_id

# Kinds that are answers or bookkeeping inside a thread: they never start a turn.
_NEVER_WAKE_KINDS = frozenset({"reply", "retraction", "notice"})


def _cls(msg_class: str) -> str:
    return CLASS_ALIASES.get(msg_class.lower(), msg_class.lower())


@dataclass(frozen=True)
class WakeFacts:
    """What the bus knows about one message and its receiver when deciding a wake."""

    msg_class: str
    kind: str
    from_session: str | None
    from_handle: str
    receiver_parent: str | None
    receiver_delegator: str | None
    receiver_turns: int
    receiver_gave_work_to_sender: bool
    from_member: bool = False


def _sent_by(f: WakeFacts, who: str | None) -> bool:
    # parent/delegator may be recorded as a session id or a handle (a person's handle).
    return who is not None and who in {f.from_session, f.from_handle}


def gave_work(
    recorded: bool, sender_parent: str | None, receiver: str, receiver_handle: str | None
) -> bool:
    """Whether the receiver gave the sender work: recorded so (its first work to it), or
    the sender's session was opened as the receiver's child (its parent names the
    receiver's session or handle)."""
    return recorded or (sender_parent is not None and sender_parent in (receiver, receiver_handle))


def may_wake(f: WakeFacts) -> tuple[bool, str]:
    """Whether this message may wake an idle receiver, and why (or why not)."""
    cls = _cls(f.msg_class)
    if f.kind in _NEVER_WAKE_KINDS:
        return False, f.kind
    if cls == "fyi":
        return False, "fyi"
    if cls == "blocker":
        return True, "blocker"
    if f.kind == "item" and f.from_member:
        return True, "member"
    if f.kind == "decision":
        # The counterparty answered a request the receiver made: like a report of work
        # the receiver gave out.
        return True, "decision"
    if cls == "action":
        if _sent_by(f, f.receiver_parent):
            return True, "parent"
        if _sent_by(f, f.receiver_delegator):
            return True, "delegator"
    if cls == "report" and f.receiver_gave_work_to_sender:
        return True, "report"
    if f.receiver_turns == 0:
        return True, "first_work"
    if cls == "report":
        return False, "not_given_work"
    return False, "not_from_parent"


def is_first_work(f: WakeFacts) -> bool:
    """True when this message is the receiver's first work: the bus then records the
    sender as delegator (if none yet) and that the sender gave work to the receiver."""
    return f.receiver_turns == 0 and _cls(f.msg_class) != "fyi" and f.kind == "message"


@dataclass(frozen=True)
class InboxView:
    """One session's delivery state, as the worker sees it when deciding."""

    state: str  # "idle" | "running" | "closing" | "closed"
    agent_inbox: bool
    prompt_waiting: bool
    pending: int  # new messages not yet in any notice
    first_wake_at: int | None  # ms of the first wake-worthy pending message
    first_pending_at: int | None  # ms of the oldest pending message
    building: bool  # a notice is being written right now
    retry_at: int | None  # a refused notice is retried no earlier than this
    # Notices on the file floor no drain has taken, not yet woken for (floor_times): a
    # notice written for a running turn that ended before the harness drained it.
    floor_wake_at: int | None = None  # ms of the first wake-worthy message in them
    floor_first_at: int | None = None  # ms of the oldest message in them


Action = Literal["raw", "notice", "wake", "wake_floor", "schedule", "wait", "nothing"]


def floor_times(records: Iterable[dict[str, Any]]) -> tuple[int | None, int | None]:
    """``(floor_wake_at, floor_first_at)`` over a session's floor records (notices
    written to the file and not yet confirmed): records a drain took (``gone``) or that
    a wake was already run for (``woken``) do not count. ``new`` and ``wake`` hold
    pairs of message id and arrival ms."""
    wake_at: int | None = None
    first_at: int | None = None
    for rec in records:
        if not isinstance(rec, dict) or rec.get("gone") or rec.get("woken"):
            continue
        for field in ("new", "wake"):
            pairs = rec.get(field) or []
            for at in pairs[1::2]:
                try:
                    ms = int(at)
                except (TypeError, ValueError):
                    continue
                first_at = ms if first_at is None else min(first_at, ms)
                if field == "wake":
                    wake_at = ms if wake_at is None else min(wake_at, ms)
    return wake_at, first_at


@dataclass(frozen=True)
class Plan:
    """What to do now: deliver raw, send a steer notice, wake, schedule for ``at``,
    wait for an event (turn start/end, the notice in flight), or nothing."""

    action: Action
    at: int | None
    reason: str


_STATES = frozenset({"idle", "running", "closing", "closed"})


def decide(view: InboxView, now_ms: int, debounce_ms: int, flush_ms: int) -> Plan:
    """The next step for one session's pending messages."""
    if view.state not in _STATES:
        raise ValueError(f"unknown session state {view.state!r}")
    if view.state in ("closing", "closed"):
        return Plan("raw", None, view.state)
    if not view.agent_inbox:
        return Plan("raw", None, "agent_inbox_off")
    if view.pending <= 0:
        if view.state == "idle" and not view.building and view.floor_first_at is not None:
            # Idle with a notice no drain took: the wake rules, as for new messages.
            return _idle(
                view.floor_wake_at, view.floor_first_at, now_ms, debounce_ms, flush_ms, "wake_floor"
            )
        return Plan("nothing", None, "no_pending")
    if view.building:
        # Only one notice in flight per session; its completion triggers the next decide.
        return Plan("wait", None, "building")
    if view.retry_at is not None and view.retry_at > now_ms:
        return Plan("schedule", view.retry_at, "retry")
    if view.state == "running":
        if view.prompt_waiting:
            # No steer ahead of a person's prompt: the notice rides in that prompt's turn,
            # at its turn start.
            return Plan("wait", None, "prompt_waiting")
        return Plan("notice", None, "steer")
    return _idle(view.first_wake_at, view.first_pending_at, now_ms, debounce_ms, flush_ms, "wake")


@dataclass(frozen=True)
class SteerFacts:
    """What a delivery's snapshot shows of a session with something new, for the steer
    rule (:func:`steers`). ``agent_inbox``: as the session names it, or the bus's default."""

    state: str
    agent_inbox: bool
    prompt_waiting: bool
    wake_pending: bool  # a wake's command not yet run (settled before the plan)
    in_flight: bool  # a notice is being written right now
    unconfirmed: bool  # notices on the file floor that no drain confirmed yet
    retry_at: int | None  # a refused notice is retried no earlier than this
    now_ms: int


def steers(f: SteerFacts) -> bool:
    """The steer rule: whether a delivery sends a running session's steer in its own run
    now (what is new goes into one notice, written at once). Exactly where :func:`decide`
    plans ``notice`` for a running session and nothing an earlier run left is to be
    settled first (a notice in flight or unconfirmed, a wake command pending). The
    snapshot's Lua (``steer_ready`` in ``parts/snapshot.lua``) writes the same rule; a
    table-driven test runs both over every row."""
    return (
        f.state == "running"
        and f.agent_inbox
        and not f.prompt_waiting
        and not f.wake_pending
        and not f.in_flight
        and not f.unconfirmed
        and (f.retry_at is None or f.retry_at <= f.now_ms)
    )


def _idle(
    wake_at: int | None,
    first_at: int | None,
    now_ms: int,
    debounce_ms: int,
    flush_ms: int,
    wake: Action,
) -> Plan:
    """An idle session's messages: a wake at the debounce for wake-worthy ones, else at
    the flush."""
    if wake_at is not None:
        due = wake_at + debounce_ms
        if now_ms >= due:
            return Plan(wake, None, "debounced")
        return Plan("schedule", due, "debounce")
    if first_at is None:
        # Age unknown: deliver now rather than defer forever (never strand a message).
        return Plan(wake, None, "flush")
    due = first_at + flush_ms
    if now_ms >= due:
        return Plan(wake, None, "flush")
    return Plan("schedule", due, "flush")


def from_member(
    info: SessionInfo | None, msg: dict[str, Any], status: Callable[[str, str], str | None]
) -> bool:
    """Whether an ``item`` message comes from an active member of the receiver's
    workspace (its ``from`` is ``<workspace>:<member>``); the inbox wakes on those."""
    if info is None or not info.workspace or msg.get("kind") != "item":
        return False
    workspace, _, name = str(msg.get("from", "")).partition(":")
    if workspace != info.workspace:
        return False
    try:
        check_session_id(name, "member name")
        return status(check_session_id(workspace, "workspace"), name) == ACTIVE
    except BadInput:
        return False


# A failing notice's retry doubles from INBOX_RETRY_S with each failure in a row, up to
# this: a floor that stays unwritable is tried every few minutes, not every 30 s.
RETRY_CAP_S = 600.0


def retry_delay_s(retry_s: float, faults: int, cap_s: float = RETRY_CAP_S) -> float:
    """Seconds until the retry of a notice whose write failed ``faults`` times in a row
    (1: the first failure): ``retry_s`` doubled per earlier failure, at most ``cap_s``
    (never less than ``retry_s``)."""
    doubled = retry_s * 2 ** min(max(faults - 1, 0), 30)
    return max(retry_s, min(doubled, cap_s))
