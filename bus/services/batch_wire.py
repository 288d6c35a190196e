"""What ``append_many.lua`` is given and answers for a batch send
(:mod:`bus.services.send_many`), and the send answers made from it.

- a receiver's answer is kept per :data:`Standing` (its session, host, recipient state,
  listening, last_seen): a swarm's batches repeat them, so a batch builds neither the
  answer nor its JSON parts anew (:func:`answer_parts`: the answer as ``ids`` keeps it,
  split around the thread, joined with each message's thread in the script);
- the receivers' session records as this process last read them (:data:`RECORDS`): the
  appends assume them and the script checks them, so no round trip reads the receivers
  first; a wrong or missing guess costs that receiver a second round trip (the script
  writes nothing of it and says the record), never a wrong answer.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from bus.core.errors import RateLimited
from bus.core.models import Message, Recipient, SendAnswer
from bus.store import packing

# A receiver's answer as it stands in one batch: (sid, host, recipient state, listening,
# last_seen).
Standing = tuple[str, str, str, bool, int | None]


@lru_cache(maxsize=4096)
def answer(standing: Standing) -> dict[str, Any]:
    """A stored message's answer to the receiver but its id and thread (as ``Bus.post``
    makes it; a test holds them equal). Shared: :func:`template` copies it."""
    sid, host, state, listening, seen = standing
    return SendAnswer(
        id="",
        thread="",
        state="stored",
        recipient=Recipient(
            session=sid, host=host, state=state, listening=listening, last_seen=seen
        ),
    ).to_json()


def template(standing: Standing) -> dict[str, Any]:
    """:func:`answer`, a copy a caller may change."""
    got = answer(standing)
    return {**got, "recipient": dict(got["recipient"])}


_THREAD_MARK = "\x02"
_THREAD_MARK_JSON = json.dumps(_THREAD_MARK)[1:-1]


@lru_cache(maxsize=4096)
def answer_parts(standing: Standing) -> tuple[str, str]:
    """The send answer as ``ids`` keeps it (:func:`bus.store.packing.keep`: no id, the id's field
    says it) split around the thread: ``append_many.lua`` joins the parts with each
    message's thread (no JSON escaping needed: :data:`~bus.core.models.THREAD_ID_PATTERN`).
    One per receiver's standing, whatever the threads: a batch to many sessions encodes
    no JSON per receiver and thread."""
    marked = {**answer(standing), "thread": _THREAD_MARK}
    head, mark, tail = packing.keep(marked, standing[0], "").partition(_THREAD_MARK_JSON)
    if not mark:  # never: the template's thread is the mark
        raise RuntimeError("the send answer template lost its thread")
    return head, tail


# A receiver's session record as append_many.lua compares it (host, state, last_seen,
# opened_at, each ended by a newline) and as read, by (key prefix, session). Shared by
# the process's buses.
Found = tuple[str, str, int, int]
RECORDS: dict[tuple[str, str], tuple[str, Found | None]] = {}
RECORDS_MAX = 65536
UNREAD = ("?", None)  # no guess: never a record's form


def remember(at: tuple[str, str], raw: list[Any]) -> Found | None:
    """Remember the record ``append_many.lua`` read (four fields, false when unset);
    ``(host, state, last_seen, opened_at)``, or ``None`` when it has no host."""
    host, state, seen, opened = (str(f) if f else "" for f in raw)
    found = (host, state or "idle", int(seen or 0), int(opened or 0)) if host else None
    if len(RECORDS) >= RECORDS_MAX:
        RECORDS.clear()
    RECORDS[at] = (f"{host}\n{state}\n{seen}\n{opened}\n", found)
    return found


def blobs(msgs: list[Message], threads: list[str], idx: list[int]) -> tuple[str, str]:
    """One receiver's groups and messages as ``append_many.lua`` reads them."""
    groups: dict[tuple[str, str, str], int] = {}
    lines = []
    for i in idx:
        msg = msgs[i]
        sender = (threads[i], msg.from_, msg.from_session or "")
        group = groups.get(sender)
        if group is None:
            group = groups[sender] = len(groups) + 1
        lines.append(f"{msg.id}\n{group}\n{msg.line()}\n")
    return "".join(f"{t}\n{f}\n{fs}\n" for t, f, fs in groups), "".join(lines)


def no_session(sid: str) -> str:
    return f"no session {sid!r} is registered"


def receipt_rows(
    msgs: list[Message], threads: list[str], appending: set[str], bounced: set[int]
) -> list[tuple[Message, str, str | None, str, str]]:
    """The receipt rows (:meth:`~bus.delivery.receipts.Receipts.open_many`) of a round, in the
    order sent: the messages being appended, and those found bounced."""
    rows: list[tuple[Message, str, str | None, str, str]] = []
    for i, msg in enumerate(msgs):
        sid = msg.to_id
        if sid in appending:
            rows.append((msg, sid, threads[i], "stored", ""))
        elif i in bounced:
            rows.append((msg, sid, None, "bounced", no_session(sid)))
    return rows


def told(reply: str) -> dict[int, list[tuple[str, str]]]:
    """``append_many.lua``'s reply: each receiver's lines (1-based), kind and the rest."""
    out: dict[int, list[tuple[str, str]]] = {}
    for line in reply.split("\n"):
        if line:
            r, _, rest = line.partition(" ")
            kind, _, rest = rest.partition(" ")
            out.setdefault(int(r), []).append((kind, rest))
    return out


def inbox_full(sid: str, cap: int) -> RateLimited:
    """What a send to a session holding ``cap`` messages is refused (``Store.queue.append``)."""
    return RateLimited(
        f"session {sid} holds {cap} messages already; nothing was stored",
        code="inbox_full",
        session=sid,
    )


def bounced_answer(msg: Message) -> dict[str, Any]:
    """The answer of a message to a session that is not registered."""
    sid = msg.to_id
    return SendAnswer(
        ok=False,
        id=msg.id,
        state="bounced",
        recipient=Recipient(session=sid, state="unknown"),
        reason=no_session(sid),
    ).to_json()
