"""Batched ingest: ``Bus.send_many``, ``inbox send --jsonl`` and ``POST /v1/send/batch``.

A batch is validated whole before anything is written: one bad item refuses the whole
batch (a :class:`~bus.core.errors.BadInput` naming each bad item by its index), so a caller
never has to work out which half of a batch went in. Then:

- the receivers' messages are appended by ``append_many.lua`` (the batched
  ``append.lua``: same keys, records and answers), which also opens each stored
  message's receipt: one call for several receivers on a standalone server, one per
  receiver on a cluster; all calls in one pipeline, run without redis-py's ``SCRIPT
  EXISTS`` round trip and packed without redis-py's per-argument packing
  (:meth:`~bus.store.many.ManyStore.execute_loaded`). A receiver's messages go as one
  argument, and the send answer JSON is built in the script from three parts kept per
  receiver (joined with each id and thread), so the Python side packs a few arguments
  per message and encodes no JSON per receiver;
- the answers are made from each receiver's session record as this process last read it
  (:data:`_RECORDS`); the script reads the record and writes nothing of a receiver whose
  record differs (or that has none): that receiver is written (or bounced) in a second
  round trip, from the record read. A batch to receivers whose records stand is one
  round trip;
- one delivery is dispatched per receiver per batch (the script's pending flag).

The answers are what a :meth:`~bus.api.Bus.send` per message would have answered, in
order, resends included (``duplicate``, the first answer). ``wait`` has no batched form.

The same guarantees as a send per message, still batched:

- **Thread parties**: a message naming an existing thread its sender or receiver is no
  party to is refused ``not_a_party`` (all named threads looked up in one round trip);
  in a batch that is one bad item, so the batch is refused whole.
- **Sender rate** (``INBOX_SEND_RATE``/``INBOX_SEND_BURST``): a batch takes one token per
  message, each sender's in one ``rate.lua`` call. :func:`send_many` (and so
  ``POST /v1/send/batch``) is refused whole, ``rate_limited``, nothing written, when a
  sender's bucket lacks the tokens (a batch larger than the burst never fits: split it).
  :func:`send_each` (``send --jsonl``, per chunk) takes what the bucket holds: the first
  lines go in, the rest are refused ``rate_limited`` one by one, as sends would be.
- **Unread cap** (``INBOX_MAX_UNREAD``): ``append_many.lua`` counts the session's held
  messages before each message, as ``append.lua`` does; what does not fit is answered
  ``{"ok": false, "error": "inbox_full", ...}`` (the single send's refusal, plus ``id``),
  not stored, no receipt, nothing in the outbox; the rest of the batch goes in.
- **Receipts**: each stored message opens its receipt in its append (``append_many.lua``
  runs ``receipt_open.lua``'s rule for a stored message: kept when it says stored, a
  bounced one gives way) and its sender's outbox entry in the same pipeline (one outbox
  write per sender); a bounced one gets its ``bounced`` receipt (``receipt_open.lua``);
  ``recipient`` carries ``state`` (``stale`` after ``INBOX_STALE_S``) and ``last_seen``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from bus.core.errors import BadInput, BusError, RateLimited, Refused
from bus.core.models import Message, Recipient, SendAnswer, SessionInfo, now_ms, parse_message
from bus.core.threads import thread_id, thread_key
from bus.delivery.dispatch import deliver_many
from bus.delivery.receipts import recipient_state
from bus.store import packing, receipt_index
from bus.trust.tokens import SCOPE_WRITE, Claims

from . import id_owner
from .conversation import _list as json_list

if TYPE_CHECKING:
    from .ports import Sender

# Messages per pipeline: bounds the memory of one write and the time one script call
# holds Redis (a few ms), while keeping the round trips per message far below one.
WRITE_CHUNK = 1000
MAX_ERRORS_LISTED = 20


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
    return bus.settle_sender(data, claims)


def party_refusal(msg: Message, parties: list[str], exists: bool) -> Refused | None:
    """``not_a_party`` when ``msg`` names an existing thread (``exists``, or it has
    ``parties``) whose parties do not include its sender and its receiver."""
    inside = msg.from_session in parties and msg.to_id in parties
    if msg.thread and (parties or exists) and not inside:
        return Refused(
            f"{msg.from_session or msg.from_!r} is not a party to {msg.thread}",
            code="not_a_party",
        )
    return None


def _check_parties(bus: Sender, checked: list[Message | BusError]) -> None:
    """Replace each message refused :func:`party_refusal` by its refusal; every named
    thread read in one round trip."""
    named = list(dict.fromkeys(c.thread for c in checked if isinstance(c, Message) and c.thread))
    if not named:
        return
    got = bus.store.thread_parties_many(named)
    found = {t: (json_list(raw), exists) for t, (raw, exists) in zip(named, got, strict=True)}
    for i, c in enumerate(checked):
        if isinstance(c, Message) and c.thread:
            refusal = party_refusal(c, *found[c.thread])
            if refusal is not None:
                checked[i] = refusal


def _check_ids(bus: Sender, checked: list[Message | BusError], given: list[bool]) -> None:
    """Replace each message whose caller-given id is another sender's by ``id_taken``
    (:mod:`bus.services.id_owner`); every given id looked up in one round trip."""
    ids = [c.id for c, g in zip(checked, given, strict=True) if g and isinstance(c, Message)]
    if not ids:
        return
    found = id_owner.owners(bus.store, ids)
    if not found:
        return
    for i, c in enumerate(checked):
        if given[i] and isinstance(c, Message):
            refusal = id_owner.id_refusal(c, found.get(c.id))
            if refusal is not None:
                checked[i] = refusal


def _check(bus: Sender, items: Sequence[Any], claims: Claims | None) -> list[Message | BusError]:
    handles: dict[str, str] = {}
    out: list[Message | BusError] = []
    given: list[bool] = []
    for item in items:
        given.append(isinstance(item, Message) or (isinstance(item, dict) and "id" in item))
        try:
            out.append(parse_message(_sender_data(bus, item, claims, handles)))
        except BusError as exc:
            out.append(exc)
    _check_parties(bus, out)
    _check_ids(bus, out, given)
    return out


def check_each(
    bus: Sender, items: Sequence[Any], token: str | None = None
) -> list[Message | BusError]:
    """Validate each item on its own: its message, or the refusal it would get (bad
    input, a forged sender, ``not_a_party``)."""
    return _check(bus, items, bus.claims(token, SCOPE_WRITE))


def _prepare(bus: Sender, items: Sequence[Any], claims: Claims | None) -> list[Message]:
    checked = _check(bus, items, claims)
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


def prepare(bus: Sender, items: Sequence[Any], token: str | None = None) -> list[Message]:
    """Validate a whole batch; raise one BadInput listing the bad items, writing nothing."""
    return _prepare(bus, items, bus.claims(token, SCOPE_WRITE))


# -- the sender's rate ---------------------------------------------------------------------


def sender_of(msg: Message, claims: Claims | None) -> str:
    """Whose bucket a message takes its token from (as ``Bus.send`` does)."""
    return claims.actor if claims else msg.from_session or msg.from_


def over_rate(bus: Sender, sender: str, batch: int = 1) -> RateLimited:
    """The refusal of a send (``batch`` 1) or a batch over ``sender``'s rate."""
    s = bus.settings
    what = ""
    if batch > 1:
        what = f"; a batch of {batch} takes {batch} tokens at once"
        if batch > s.send_burst:
            what += ", more than the burst: split it"
    return RateLimited(
        f"{sender} is sending faster than {s.send_rate:g}/s (burst {s.send_burst:g}){what};"
        " nothing was stored, try again shortly",
        code="rate_limited",
    )


def take_tokens(bus: Sender, wanted: dict[str, int], *, partial: bool) -> dict[str, int] | None:
    """Take ``wanted[sender]`` tokens from each sender's bucket, all senders in one round
    trip: the number each got (``partial``: as many as there are, else all or none);
    ``None`` when no rate is set."""
    s, store = bus.settings, bus.store
    if s.send_rate <= 0:
        return None
    senders = [k for k, n in wanted.items() if n > 0]
    pipe = store.pipeline()
    for sender in senders:
        store.script("rate")(
            keys=[store.k.bucket(sender)],
            args=[s.send_rate, s.send_burst, wanted[sender], "1" if partial else "0"],
            client=pipe,
        )
    return {k: int(n) for k, n in zip(senders, pipe.execute(), strict=True)}


def _take_whole(bus: Sender, msgs: Sequence[Message], claims: Claims | None) -> None:
    """Every message's token or none: ``rate_limited`` with nothing written (tokens one
    sender's bucket gave are given back when another's could not)."""
    wanted = dict(Counter(sender_of(m, claims) for m in msgs))
    got = take_tokens(bus, wanted, partial=False)
    if got is None:
        return
    short = [k for k, n in got.items() if n < wanted[k]]
    if not short:
        return
    store = bus.store
    taken = [k for k, n in got.items() if n > 0]
    if taken:
        pipe = store.pipeline()
        for sender in taken:
            store.script("rate")(
                keys=[store.k.bucket(sender)],
                args=[bus.settings.send_rate, bus.settings.send_burst, -got[sender]],
                client=pipe,
            )
        pipe.execute()
    raise over_rate(bus, short[0], wanted[short[0]])


# -- sending -----------------------------------------------------------------------------------


def send_many(
    bus: Sender, items: Sequence[Any], *, token: str | None = None
) -> list[dict[str, Any]]:
    """Validate, rate and store a batch, each whole or not at all; one answer per item,
    in order (see the module)."""
    claims = bus.claims(token, SCOPE_WRITE)
    msgs = _prepare(bus, items, claims)
    _take_whole(bus, msgs, claims)
    return store_many(bus, msgs)


def send_each(
    bus: Sender, items: Sequence[Any], token: str | None = None
) -> list[dict[str, Any] | BusError]:
    """A stream's chunk (``send --jsonl``): each item answered on its own, its answer or
    its refusal (bad input, ``not_a_party``, ``rate_limited`` once its sender's bucket
    is empty), the good ones stored as one batch."""
    claims = bus.claims(token, SCOPE_WRITE)
    checked = _check(bus, items, claims)
    out: list[dict[str, Any] | BusError | Message] = list(checked)
    good = [(i, c) for i, c in enumerate(checked) if isinstance(c, Message)]
    got = take_tokens(bus, dict(Counter(sender_of(m, claims) for _i, m in good)), partial=True)
    keep: list[tuple[int, Message]] = []
    for i, msg in good:
        sender = sender_of(msg, claims)
        if got is not None and got.get(sender, 0) <= 0:
            out[i] = over_rate(bus, sender)
            continue
        if got is not None:
            got[sender] -= 1
        keep.append((i, msg))
    for (i, _msg), answer in zip(keep, store_many(bus, [m for _i, m in keep]), strict=True):
        out[i] = answer
    return [o for o in out if not isinstance(o, Message)]


def store_many(bus: Sender, msgs: Sequence[Message]) -> list[dict[str, Any]]:
    """Store and route messages already validated and rated (:func:`send_many`,
    :func:`send_each`)."""
    answers: list[dict[str, Any]] = []
    for start in range(0, len(msgs), WRITE_CHUNK):
        answers.extend(_write(bus, list(msgs[start : start + WRITE_CHUNK])))
    return answers


# A receiver's answer as it stands in one batch: (sid, host, recipient state, listening,
# last_seen); the answers and their JSON parts are kept per such tuple (a swarm's batches
# repeat them), so a batch builds neither anew.
Standing = tuple[str, str, str, bool, int | None]


def _standing(bus: Sender, sid: str, found: tuple[str, str, int, int], now: int) -> Standing:
    host, state, seen, opened = found
    return (
        sid,
        host,
        recipient_state(state, seen or opened, now, bus.settings.stale_s),
        # Not listening on another host (Router.floor_listening), without a SessionInfo.
        host == bus.settings.host
        and bus.floor_listening(SessionInfo.model_construct(session=sid, host=host)),
        seen or None,
    )


@lru_cache(maxsize=4096)
def _answer(standing: Standing) -> dict[str, Any]:
    """A stored message's answer to the receiver but its id and thread (as ``Bus.post``
    makes it; a test holds them equal). Shared: :func:`_template` copies it."""
    sid, host, state, listening, seen = standing
    return SendAnswer(
        id="",
        thread="",
        state="stored",
        recipient=Recipient(
            session=sid, host=host, state=state, listening=listening, last_seen=seen
        ),
    ).to_json()


def _template(standing: Standing) -> dict[str, Any]:
    """:func:`_answer`, a copy a caller may change."""
    answer = _answer(standing)
    return {**answer, "recipient": dict(answer["recipient"])}


@lru_cache(maxsize=4096)
def _answer_parts(standing: Standing) -> tuple[str, str]:
    """The send answer as ``ids`` keeps it (:func:`bus.store.packing.keep`: no id, the id's field
    says it) split around the thread: ``append_many.lua`` joins the parts with each
    message's thread (no JSON escaping needed: :data:`~bus.core.models.THREAD_ID_PATTERN`).
    One per receiver's standing, whatever the threads: a batch to many sessions encodes
    no JSON per receiver and thread."""
    answer = {**_answer(standing), "thread": _THREAD_MARK}
    head, mark, tail = packing.keep(answer, standing[0], "").partition(_THREAD_MARK_JSON)
    if not mark:  # never: the template's thread is the mark
        raise RuntimeError("the send answer template lost its thread")
    return head, tail


_THREAD_MARK = "\x02"
_THREAD_MARK_JSON = json.dumps(_THREAD_MARK)[1:-1]


# A receiver's session record as append_many.lua compares it (host, state, last_seen,
# opened_at, each ended by a newline) and as read, by its session key: the appends assume
# the record last seen and the script checks it, so no round trip reads the receivers
# first. Shared by the process's buses: a wrong or missing guess costs that receiver a
# second round trip (the script writes nothing of it and says the record), never a wrong
# answer.
Found = tuple[str, str, int, int]
_RECORDS: dict[str, tuple[str, Found | None]] = {}
_RECORDS_MAX = 65536
_UNREAD = ("?", None)  # no guess: never a record's form
MAX_ROUNDS = 8


def _record(key: str, raw: list[Any]) -> Found | None:
    """Remember the record ``append_many.lua`` read (four fields, false when unset);
    ``(host, state, last_seen, opened_at)``, or ``None`` when it has no host."""
    host, state, seen, opened = (str(f) if f else "" for f in raw)
    found = (host, state or "idle", int(seen or 0), int(opened or 0)) if host else None
    if len(_RECORDS) >= _RECORDS_MAX:
        _RECORDS.clear()
    _RECORDS[key] = (f"{host}\n{state}\n{seen}\n{opened}\n", found)
    return found


def _write(bus: Sender, msgs: list[Message]) -> list[dict[str, Any]]:
    """Store ``msgs``: each receiver's appends made from the record it had when last read
    (:data:`_RECORDS`), all in one round trip; a receiver whose record differs (or this
    process never read it) is written in a second, from the record the first one read."""
    store, now = bus.store, now_ms()
    per_sid: dict[str, list[int]] = {}
    threads: list[str] = []
    for i, msg in enumerate(msgs):
        if msg.verified is None:
            msg = msgs[i] = msg.model_copy(update={"verified": bus.auth.enabled})
        per_sid.setdefault(msg.to_id, []).append(i)
        key = thread_key(
            thread=msg.thread, pr=msg.pr, topic=msg.topic, sender=msg.from_, text=msg.text
        )
        threads.append(thread_id(msg.to_id, key))  # cached: the same in every batch
    answers: list[dict[str, Any] | None] = [None] * len(msgs)
    blobs: dict[str, tuple[str, str]] = {}
    refused: list[tuple[Message, str]] = []
    due: dict[str, list[str]] = {}
    todo: list[str] = list(per_sid)
    bounced: list[int] = []
    # As text: the call packs without converting a number (bus.store.many.pack_commands).
    head = [str(now), str(store.lock_ttl_ms), str(bus.settings.max_unread)]
    for round_ in range(MAX_ROUNDS):
        if not todo and not bounced:
            break
        pipe = store.pipeline()
        queued = 0
        if round_ == 0:
            # The id -> receiver index first (the replies after it are the appends'): one
            # HSET per bucket the batch touches, not one SET per message (bus.store.receipt_index).
            queued = receipt_index.index(pipe, store.k, ((m.id, m.to_id) for m in msgs), now)
        standings: dict[str, Standing] = {}
        receivers: list[tuple[str, list[str], list[str]]] = []
        for sid in todo:
            said, found = _RECORDS.get(store.k.s(sid, "session"), _UNREAD)
            parts = ("", "")
            if found is not None:
                standings[sid] = _standing(bus, sid, found, now)
                parts = _answer_parts(standings[sid])
            if sid not in blobs:
                blobs[sid] = _blobs(msgs, threads, per_sid[sid])
            ids = [msgs[i].id for i in per_sid[sid]]
            receivers.append((sid, ids, [said, *blobs[sid], *parts]))
        calls = store.queue_append_many(pipe, head, receivers)
        # The appends open the stored messages' receipts; the bounced ones open theirs
        # here (receipt_open.lua), and every message sent gets its outbox entry (ZADD NX:
        # a message sent again next round keeps the entry of the first).
        bus.receipts.open_many(pipe, _rows(msgs, threads, set(todo), set(bounced)), appended=True)
        replies = store.execute_loaded(pipe)
        todo, bounced = [], []
        for sids, reply in zip(calls, replies[queued : queued + len(calls)], strict=True):
            told = _told(reply)
            for r, sid in enumerate(sids, 1):
                lines = told.get(r, [])
                standing = standings.get(sid)
                if lines and lines[0][0] == "s":  # its record, as read: nothing written
                    if _record(store.k.s(sid, "session"), json.loads(lines[0][1])) is None:
                        bounced.extend(per_sid[sid])
                    else:
                        todo.append(sid)
                    continue
                if standing is None:  # never: the script writes only on a matching record
                    raise RuntimeError(f"append_many.lua wrote {sid} on no record")
                template = _template(standing)
                for i in per_sid[sid]:
                    answers[i] = {**template, "id": msgs[i].id, "thread": threads[i]}
                for kind, rest in lines:
                    if kind == "d":
                        due.setdefault(standing[1], []).append(sid)
                        continue
                    n, _, prior = rest.partition(" ")
                    i = per_sid[sid][int(n) - 1]
                    if prior == "-1":
                        answers[i] = {
                            **inbox_full(sid, bus.settings.max_unread).to_json(),
                            "id": msgs[i].id,
                        }
                        refused.append((msgs[i], sid))
                    else:
                        answers[i] = {**packing.restore(prior, sid, msgs[i].id), "duplicate": True}
        for i in bounced:
            sid = msgs[i].to_id
            answers[i] = SendAnswer(
                ok=False,
                id=msgs[i].id,
                state="bounced",
                recipient=Recipient(session=sid, state="unknown"),
                reason=_no_session(sid),
            ).to_json()
    if todo or bounced:  # a record changed under every one of the rounds
        raise BusError(f"the receivers' records kept changing; send again: {todo[:3]}")
    for host, sids in due.items():  # a few tasks per host per batch, not one per receiver
        deliver_many(bus.dispatcher, host, sids)
    if refused:
        _unwrite(bus, refused, now)
    return [a for a in answers if a is not None]


def _no_session(sid: str) -> str:
    return f"no session {sid!r} is registered"


def _blobs(msgs: list[Message], threads: list[str], idx: list[int]) -> tuple[str, str]:
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


def _rows(
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
            rows.append((msg, sid, None, "bounced", _no_session(sid)))
    return rows


def _told(reply: str) -> dict[int, list[tuple[str, str]]]:
    """``append_many.lua``'s reply: each receiver's lines (1-based), kind and the rest."""
    out: dict[int, list[tuple[str, str]]] = {}
    for line in reply.split("\n"):
        if line:
            r, _, rest = line.partition(" ")
            kind, _, rest = rest.partition(" ")
            out.setdefault(int(r), []).append((kind, rest))
    return out


def inbox_full(sid: str, cap: int) -> RateLimited:
    """What a send to a session holding ``cap`` messages is refused (``Store.append``)."""
    return RateLimited(
        f"session {sid} holds {cap} messages already; nothing was stored",
        code="inbox_full",
        session=sid,
    )


def _unwrite(bus: Sender, refused: list[tuple[Message, str]], now: int) -> None:
    """Messages refused ``inbox_full`` keep no recipient index and no outbox entry (as
    ``Store.append`` and ``Bus.post`` leave a refused send); only on a refusal."""
    bus.store.unindex_many((msg.id for msg, _sid in refused), now)
    bus.receipts.unlist_refused(refused)
