"""The wire format: the one source of truth for every JSON the bus reads or writes.

``Message`` is a superset of the prox inbox line, so prox consumers keep working. The
JSON Schemas under ``schemas/`` are exported from these models by ``python -m
bus.ops.schemas`` and a test fails when they drift.
"""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from .errors import BadInput
from .ids import MESSAGE_ID_PATTERN, SESSION_ID_PATTERN
from .ids import check_session_id as check_session_id
from .item_views import ACTIVE as ACTIVE  # a member's status in a workspace
from .item_views import REMOVED as REMOVED

THREAD_ID_PATTERN = r"^thr_[a-z2-7]{1,60}$"
HANDLE_PATTERN = r"^[^\s:]{1,100}:[^\s]{1,180}$"
MAX_TEXT = 8000
MAX_FILES = 4

# Workspace names no member may be added under (the operator's handles live there).
RESERVED_WORKSPACES = frozenset({"operator"})


def _not_dots(value: str) -> str:
    # "." and ".." match the pattern but would name a directory outside the session's own.
    if value in (".", ".."):
        raise ValueError("'.' and '..' are not session ids")
    return value


SessionId = Annotated[str, StringConstraints(pattern=SESSION_ID_PATTERN), AfterValidator(_not_dots)]
ThreadId = Annotated[str, StringConstraints(pattern=THREAD_ID_PATTERN)]
MessageId = Annotated[str, StringConstraints(pattern=MESSAGE_ID_PATTERN)]
Handle = Annotated[str, StringConstraints(pattern=HANDLE_PATTERN)]

Urgency = Literal["queue", "urgent"]
Kind = Literal["message", "notice", "reply", "retraction", "decision", "item"]
MessageClass = Literal["blocker", "action", "fyi", "report"]

CLASS_ALIASES: dict[str, str] = {
    "blocker": "blocker",
    "block": "blocker",
    "question": "blocker",
    "action": "action",
    "result": "action",
    "fyi": "fyi",
    "report": "report",
}


def now_ms() -> int:
    return int(time.time() * 1000)


def new_id() -> str:
    return str(uuid.uuid4())


class FileRef(BaseModel):
    """A file a message carries (pictures, section 8); the bytes live elsewhere."""

    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, StringConstraints(min_length=1, max_length=255)]
    content_type: str
    size: Annotated[int, Field(ge=0)]
    sha256: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]


class Message(BaseModel):
    """One message, addressed to one session, in exactly one thread."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    v: Literal[1] = 1
    id: MessageId = Field(default_factory=new_id)
    ts: Annotated[int, Field(ge=0)] = Field(default_factory=now_ms)
    from_: Handle = Field(alias="from")
    to: str | None = None
    to_id: SessionId
    text: Annotated[str, StringConstraints(max_length=MAX_TEXT)]
    urgency: Urgency = "queue"
    kind: Kind = "message"
    class_: MessageClass = Field(default="action", alias="class")
    thread: ThreadId | None = None
    pr: Annotated[int, Field(ge=1)] | None = None
    topic: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = None
    from_session: SessionId | None = None
    files: Annotated[list[FileRef], Field(max_length=MAX_FILES)] | None = None
    verified: bool | None = Field(
        default=None,
        description="Set by the bus on receipt: true when a token authenticated the sender.",
    )

    @field_validator("class_", mode="before")
    @classmethod
    def _class_alias(cls, value: Any) -> Any:
        if isinstance(value, str) and value.lower() in CLASS_ALIASES:
            return CLASS_ALIASES[value.lower()]
        return value

    @model_validator(mode="after")
    def _text_or_files(self) -> Message:
        if not self.text.strip() and not self.files:
            raise ValueError("text must not be blank (1-8000 characters) unless files are attached")
        return self

    def wire(self) -> dict[str, Any]:
        """The JSON object written on the wire (aliases, no nulls)."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")

    def line(self) -> str:
        return self.model_dump_json(by_alias=True, exclude_none=True)

    @property
    def first_line(self) -> str:
        for ln in self.text.splitlines():
            if ln.strip():
                return ln.strip()
        return ""


def check_text(text: object) -> str:
    """A message text as a message would take it (1-8000 characters, not blank)."""
    if not isinstance(text, str):
        raise BadInput("text must be a string")
    if len(text) > MAX_TEXT:
        raise BadInput(f"text is longer than {MAX_TEXT} characters (refused, not truncated)")
    if not text.strip():
        raise BadInput(f"text must not be blank (1-{MAX_TEXT} characters)")
    return text


def parse_message(data: Any) -> Message:
    """Validate a wire object, translating pydantic's errors into one clear BadInput."""
    if isinstance(data, (str, bytes)):
        try:
            return Message.model_validate_json(data)
        except ValidationError as exc:
            raise BadInput(describe(exc)) from exc
    if not isinstance(data, dict):
        raise BadInput("a message must be a JSON object")
    try:
        return Message.model_validate(data)
    except ValidationError as exc:
        raise BadInput(describe(exc)) from exc


def describe(exc: ValidationError) -> str:
    """One line naming each bad field, for the CLI's stderr and HTTP 400s."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "message"
        if err["type"] == "extra_forbidden":
            parts.append(f"unknown field {loc!r}")
        elif loc in ("to_id", "from_session") and err["type"] in (
            "string_pattern_mismatch",
            "value_error",
        ):
            shown = repr(err.get("input"))[:60]
            parts.append(f"{loc}: invalid session id {shown}: must match {SESSION_ID_PATTERN}")
        elif loc in ("from", "to") and err["type"] == "string_pattern_mismatch":
            shown = repr(err.get("input"))[:60]
            parts.append(f"{loc} must be host:name (no spaces), not {shown}")
        elif err["type"] == "string_too_long" and loc == "text":
            parts.append(f"text is longer than {MAX_TEXT} characters (refused, not truncated)")
        elif err["type"] == "value_error" and "error" in err.get("ctx", {}):
            # Our own validators' words, without pydantic's "Value error, " before them.
            words = str(err["ctx"]["error"])
            parts.append(words if loc == "message" else f"{loc}: {words}")
        else:
            parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


class Recipient(BaseModel):
    session: str
    host: str | None = None
    state: str
    listening: bool = False
    last_seen: int | None = None
    # Whether the session's host has a worker beating (``up``), one being started
    # (``starting``), one that stopped (``down``) or none ever (``unseen``): the message
    # waits for it but when ``up`` (bus.core.status_view.beat_state).
    host_state: str | None = None


class SendAnswer(BaseModel):
    """What ``send`` answers; never a bare ok."""

    ok: bool = True
    id: str
    thread: str | None = None
    state: Literal["stored", "bounced", "withdrawn", "answered", "error"] = "stored"
    recipient: Recipient | None = None
    reason: str | None = None
    answer: str | None = None
    error: str | None = None
    duplicate: bool = False
    # The durability level the store confirmed before this answer (bus.core.durability).
    durable: Literal["memory", "disk", "replica"] | None = None

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class DeliverAnswer(BaseModel):
    """What local delivery (``inbox deliver``, HTTP ``/send``) answers, as prox does."""

    ok: bool = True
    via: Literal["socket", "file"]
    id: str
    path: str | None = None


class SessionInfo(BaseModel):
    """A registered session."""

    model_config = ConfigDict(extra="ignore")

    session: SessionId
    handle: str
    host: str
    state: Literal["idle", "running", "closing", "closed"] = "idle"
    parent: str | None = None
    delegator: str | None = None
    turns: int = 0
    wake_cmd: str | None = None
    # The notice a wake is running the wake command for (set with the state, cleared
    # with the wake record): left behind, the worker died in between (bus.delivery.inbox).
    wake_pending: str | None = None
    # When a wake set the session running (ms), until its harness reports a turn: past
    # INBOX_WAKE_TURN_TIMEOUT_S with none reported, the session is idle again.
    woken_at: int | None = None
    # Why nothing can wake this idle session (its harness's hooks found no way): shown by
    # status, doctor and the session's start context.
    wake_problem: str | None = None
    # How its last wake command failed (it exited non-zero or could not start); cleared
    # by the next wake command that works.
    wake_error: str | None = None
    prompt_waiting: bool = False
    agent_inbox: bool | None = None
    workspace: str | None = None
    starter: str | None = None
    opened_at: int = 0
    updated_at: int = 0
    last_seen: int = 0
    # Why its last notice could not be written (its floor: the error), since when, and
    # how many tries in a row failed; cleared by the next notice written. The retry
    # backs off with the count (bus.core.policy.retry_delay_s).
    fault: str | None = None
    fault_at: int | None = None
    faults: int | None = None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class NoticeThread(_Strict):
    """One thread's line in a notice (the structured part of a notice line)."""

    thread: str
    label: str
    count: int
    senders: list[str]
    newest_at: int
    newest_preview: str
    blocker: bool
    key: str = ""
    # Whether every message in this share of the notice had an authenticated sender.
    verified: bool = False
    unverified: list[str] = Field(default_factory=list)


class NoticePayload(_Strict):
    threads: list[NoticeThread]
    messages: list[str]


class NoticeLine(_Strict):
    """A notice as written to the socket or the floor: a wire line of kind ``notice``
    whose ``text`` is what the model reads and whose ``notice`` lets a drain merge it."""

    v: Literal[1] = 1
    id: str
    ts: int
    from_: str = Field(alias="from")
    to_id: SessionId
    kind: Literal["notice"] = "notice"
    text: str
    urgency: Urgency | None = None
    notice: NoticePayload
    # Set by the receiving side (bus.delivery.said) on a notice that carries messages the
    # model was handed already, under an earlier notice: their ids. Added as it is handed on
    # (a drain, a listener, a waiter), never on the floor.
    repeats: list[str] | None = None
    # Messages an earlier notice carried that were given back after a crash (a worker
    # killed after the write, a drainer after its take): they may have been heard.
    redelivered: list[str] | None = None


class ThreadRow(_Strict):
    """One row of ``inbox threads``."""

    threadId: str  # the wire names are camelCase
    key: str
    label: str
    from_: list[str] = Field(alias="from")
    unread: int
    new: int
    count: int
    newestAt: int
    newestPreview: str
    class_: str = Field(alias="class")
    state: str | None = None


class ThreadMessage(_Strict):
    id: str
    from_: str = Field(alias="from")
    fromSession: str | None
    class_: str = Field(alias="class")
    kind: str
    at: int | None
    text: str
    read: bool
    # Whether the sender was authenticated (a token), not self-reported.
    verified: bool = False
    files: list[FileRef] | None = None
    withdrawn: str | None = None


class ThreadView(_Strict):
    """``inbox read``: a whole thread, oldest first."""

    ok: bool = True
    threadId: str
    label: str
    state: str | None = None
    messages: list[ThreadMessage]


class DecisionAnswer(_Strict):
    """``inbox decide``'s answer."""

    ok: bool = True
    envelope_id: str
    new_state: str
    thread: str | None = None


class ItemEntry(_Strict):
    from_: str = Field(alias="from")
    text: str
    files: list[str] | None = None


class Item(_Strict):
    key: str
    title: str
    status: Literal["open", "settled"]
    answer: str | None
    revision: int
    settledAt: int | None
    updatedAt: int
    thread: list[ItemEntry]


class ReadInbox(_Strict):
    """Luke's ``read_inbox``."""

    items: list[Item]


ReceiptState = Literal[
    "stored", "noticed", "read", "answered", "withdrawn", "retracted", "bounced", "expired"
]


class ReceiptTimes(BaseModel):
    """When a message reached each state (ms); only the states it reached appear."""

    stored: int | None = None
    noticed: int | None = None
    read: int | None = None
    answered: int | None = None
    withdrawn: int | None = None
    retracted: int | None = None
    bounced: int | None = None
    expired: int | None = None


class ReceiptRecipient(BaseModel):
    session: str
    state: str
    last_seen: int | None = None


class Receipt(BaseModel):
    """The sender's view of one message (``inbox receipt``, one row of ``inbox sent``)."""

    ok: bool = True
    id: str
    to: str
    thread: str | None = None
    state: ReceiptState
    at: ReceiptTimes
    recipient: ReceiptRecipient
    reason: str | None = None
    answer: str | None = None


EXPORTED_MODELS: dict[str, type[BaseModel]] = {
    "message": Message,
    "send-answer": SendAnswer,
    "deliver-answer": DeliverAnswer,
    "session": SessionInfo,
    "notice-line": NoticeLine,
    "thread-row": ThreadRow,
    "thread-view": ThreadView,
    "decision-answer": DecisionAnswer,
    "read-inbox": ReadInbox,
    "receipt": Receipt,
}
