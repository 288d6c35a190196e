"""Batched ingest: ``Bus.send_many``, ``inbox send --jsonl`` and ``POST /v1/send/batch``.

A batch is validated whole before anything is written: one bad item refuses the whole
batch (a :class:`~bus.errors.BadInput` naming each bad item by its index), so a caller
never has to work out which half of a batch went in. Then:

- each receiver (``to`` handle or ``to_id``) is looked up once per batch, all of them in
  one pipelined round trip;
- each receiver's messages are appended by one ``append_many.lua`` call (the batched
  ``append.lua``: same keys, records and answers), all calls in one pipeline;
- one delivery is dispatched per receiver per batch (the script's pending flag).

The answers are what a :meth:`~bus.api.Bus.send` per message would have answered, in
order, resends included (``duplicate``, the first answer). ``wait`` has no batched form.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .auth import SCOPE_WRITE
from .errors import BadInput, BusError
from .models import Message, Recipient, SendAnswer, SessionInfo, now_ms, parse_message
from .receipts import recipient_state
from .threads import thread_id, thread_key

if TYPE_CHECKING:
    from .ports import Sender

# Messages per pipeline: bounds the memory of one write and the time one script call
# holds Redis (a few ms), while keeping the round trips per message far below one.
WRITE_CHUNK = 1000
MAX_ERRORS_LISTED = 20
RCPT_TTL_S = 7 * 86400  # as Store.append keeps a message id's receiver


def _sender_data(
    bus: Sender, item: dict[str, Any] | Message, claims: Any, handles: dict[str, str]
) -> dict[str, Any]:
    """``item`` as wire fields with its receiver and sender settled, as ``Bus.send`` does."""
    data = item.wire() if isinstance(item, Message) else item
    if not isinstance(data, dict):
        raise BadInput("a message must be a JSON object")
    data = dict(data)
    if "to_id" not in data and data.get("to"):
        to = str(data["to"])
        if to not in handles:
            handles[to] = bus.resolve(to).session
        data["to_id"] = handles[to]
    if claims is None:
        if bus.settings.session and not data.get("from_session"):
            data["from_session"] = bus.settings.session
        data["verified"] = False
    else:
        data = bus._as_token_subject(data, claims)
    return data


def check_each(
    bus: Sender, items: Sequence[Any], token: str | None = None
) -> list[Message | BusError]:
    """Validate each item on its own: its message, or the refusal it would get."""
    claims = bus.claims(token, SCOPE_WRITE)
    handles: dict[str, str] = {}
    out: list[Message | BusError] = []
    for item in items:
        try:
            out.append(parse_message(_sender_data(bus, item, claims, handles)))
        except BusError as exc:
            out.append(exc)
    return out


def prepare(bus: Sender, items: Sequence[Any], token: str | None = None) -> list[Message]:
    """Validate a whole batch; raise one BadInput listing the bad items, writing nothing."""
    checked = check_each(bus, items, token)
    errors = [
        {"index": i, "error": c.code, "message": str(c)}
        for i, c in enumerate(checked)
        if isinstance(c, BusError)
    ]
    if errors:
        first = errors[0]
        raise BadInput(
            f"{len(errors)} of {len(items)} messages refused, nothing was written; "
            f"item {first['index']}: {first['message']}",
            index=first["index"],
            errors=errors[:MAX_ERRORS_LISTED],
        )
    return [c for c in checked if isinstance(c, Message)]


def send_many(
    bus: Sender, items: Sequence[Any], *, token: str | None = None
) -> list[dict[str, Any]]:
    """Validate, store and route a batch; one answer per item, in order (see the module)."""
    return store_many(bus, prepare(bus, items, token))


def store_many(bus: Sender, msgs: Sequence[Message]) -> list[dict[str, Any]]:
    """Store and route messages already validated (:func:`prepare`, :func:`check_each`)."""
    answers: list[dict[str, Any]] = []
    for start in range(0, len(msgs), WRITE_CHUNK):
        answers.extend(_write(bus, list(msgs[start : start + WRITE_CHUNK])))
    return answers


def _write(bus: Sender, msgs: list[Message]) -> list[dict[str, Any]]:
    store = bus.store
    infos = store.receivers(m.to_id for m in msgs)
    # What a stored message is answered differs between receivers only in id and thread
    # (SendAnswer.to_json's shape; a test holds it equal to Bus.send's answers).
    templates: dict[str, dict[str, Any]] = {}
    for sid, found in infos.items():
        if found is not None:
            host, state, last_seen, opened_at = found
            listening = bus.floor_listening(SessionInfo.model_construct(session=sid, host=host))
            now = now_ms()
            templates[sid] = {
                "ok": True,
                "id": "",
                "thread": "",
                "state": "stored",
                "recipient": {
                    "session": sid,
                    "host": host,
                    # As Router.post: a harness unseen for INBOX_STALE_S reads "stale".
                    "state": recipient_state(
                        state, last_seen or opened_at, now, bus.settings.stale_s
                    ),
                    "listening": listening,
                    **({"last_seen": last_seen} if last_seen else {}),
                },
                "duplicate": False,
            }
    answers: list[dict[str, Any] | None] = [None] * len(msgs)
    per_sid: dict[str, list[int]] = {}
    args: dict[str, list[Any]] = {}
    threads: dict[tuple[str, str], str] = {}
    pipe = store.r.pipeline(transaction=False)
    for i, msg in enumerate(msgs):
        if msg.verified is None:
            msg = msg.model_copy(update={"verified": bus.auth.enabled})
        sid = msg.to_id
        if infos[sid] is None:
            answers[i] = SendAnswer(
                ok=False,
                id=msg.id,
                state="bounced",
                recipient=Recipient(session=sid, state="unknown"),
                reason=f"no session {sid!r} is registered",
            ).to_json()
            continue
        key = thread_key(
            thread=msg.thread, pr=msg.pr, topic=msg.topic, sender=msg.from_, text=msg.text
        )
        if (sid, key) not in threads:  # a sender's messages to one session share a thread
            threads[sid, key] = thread_id(sid, key)
        thread = threads[sid, key]
        answer = {**templates[sid], "id": msg.id, "thread": thread}
        answers[i] = answer
        per_sid.setdefault(sid, []).append(i)
        args.setdefault(sid, []).extend([msg.id, msg.line(), json.dumps(answer), thread])
        # execute_command skips redis-py's argument handling for SET: a third of the cost.
        pipe.execute_command("SET", store.k.rcpt(msg.id), sid, "EX", RCPT_TTL_S)
    now = now_ms()
    order = list(per_sid)
    for sid in order:
        store.run(
            "append_many",
            sid,
            ("stream", "ids", "idsage", "pending", "trim", "events"),
            [now, store.lock_ttl_ms, *args[sid]],
            client=pipe,
        )
    replies = pipe.execute()
    results = replies[len(replies) - len(order) :]
    for sid, result in zip(order, results, strict=True):
        dispatch, priors = result[0], result[1:]
        for i, prior in zip(per_sid[sid], priors, strict=True):
            if prior:
                answers[i] = {**json.loads(prior), "duplicate": True}
        found = infos[sid]
        if int(dispatch) and found is not None:
            bus.dispatcher.deliver(found[0], sid)
    return [a for a in answers if a is not None]
