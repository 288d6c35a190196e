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
  receiver (:mod:`bus.services.batch_wire`), so the Python side packs a few arguments
  per message and encodes no JSON per receiver;
- the answers are made from each receiver's session record as this process last read it
  (:data:`bus.services.batch_wire.RECORDS`); the script reads the record and writes
  nothing of a receiver whose record differs (or that has none): that receiver is written
  (or bounced) in a second round trip, from the record read. A batch to receivers whose
  records stand is one round trip;
- one delivery is dispatched per receiver per batch (the script's pending flag).

The answers are what a :meth:`~bus.api.Bus.send` per message would have answered, in
order, resends included (``duplicate``, the first answer). ``wait`` has no batched form.

The same guarantees as a send per message, still batched:

- **Thread parties**: a message naming an existing thread its sender or receiver is no
  party to is refused ``not_a_party`` (all named threads looked up in one round trip);
  in a batch that is one bad item, so the batch is refused whole.
- **Caller-chosen ids**: an id another sender used is refused ``id_taken``
  (:mod:`bus.services.id_owner`); the batch's ids are looked up in one script call.
- **Sender rate** (``INBOX_SEND_RATE``/``INBOX_SEND_BURST``): a batch takes one token per
  message, each sender's in one ``rate.lua`` call. :meth:`BatchSender.send_many` (and so
  ``POST /v1/send/batch``) is refused whole, ``rate_limited``, nothing written, when a
  sender's bucket lacks the tokens (a batch larger than the burst never fits: split it).
  :meth:`BatchSender.send_each` (``send --jsonl``, per chunk) takes what the bucket holds:
  the first lines go in, the rest are refused ``rate_limited`` one by one, as sends would be.
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
import queue
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from bus.core.clock import SYSTEM, Clock
from bus.core.errors import BadInput, BusError, RateLimited, Refused
from bus.core.models import Message, SessionInfo, now_ms, parse_message
from bus.core.threads import thread_id, thread_key
from bus.delivery.dispatch import deliver_many
from bus.delivery.receipts import recipient_state
from bus.store import packing
from bus.trust.tokens import SCOPE_WRITE, Claims

from . import batch_wire as wire
from . import id_owner
from .batch_wire import Standing, inbox_full
from .conversation import _list as json_list

if TYPE_CHECKING:
    from bus.core.settings import Settings
    from bus.delivery.dispatch import Dispatcher
    from bus.delivery.receipts import Receipts
    from bus.store.store import Store

__all__ = ["BatchSender", "inbox_full", "party_refusal", "sender_of"]

# Messages per pipeline: bounds the memory of one write and the time one script call
# holds Redis (a few ms), while keeping the round trips per message far below one.
WRITE_CHUNK = 1000
MAX_ERRORS_LISTED = 20
MAX_ROUNDS = 8
# The caches tests inspect, by the names they had here.
_answer_parts = wire.answer_parts
_RECORDS = wire.RECORDS


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


def sender_of(msg: Message, claims: Claims | None) -> str:
    """Whose bucket a message takes its token from (as ``Bus.send`` does)."""
    return claims.actor if claims else msg.from_session or msg.from_


def over_rate(settings: Settings, sender: str, batch: int = 1) -> RateLimited:
    """The refusal of a send (``batch`` 1) or a batch over ``sender``'s rate."""
    s = settings
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


Checked = list[Message | BusError]
T = TypeVar("T")
_END = object()


def _ahead(work: Callable[[Sequence[Any]], T], chunks: Iterator[Sequence[Any]]) -> Iterator[T]:
    """``work`` of each chunk, in order, one chunk ahead on a daemon thread (a stream's
    reader may wait on its input forever: nothing joins it). An error of the thread is
    raised here, in its place."""
    done: queue.Queue[Any] = queue.Queue(maxsize=1)

    def run() -> None:
        try:
            for chunk in chunks:
                done.put((work(chunk), None))
        except BaseException as exc:  # raised in the consumer, in order
            done.put((None, exc))
        done.put((_END, None))

    threading.Thread(target=run, name="send-ahead", daemon=True).start()
    while True:
        got, exc = done.get()
        if exc is not None:
            raise exc
        if got is _END:
            return
        yield got


class BatchSender:
    """Validates, rates and stores batches for one store (providers are called on use)."""

    def __init__(
        self,
        store: Callable[[], Store],
        settings: Settings,
        *,
        receipts: Receipts,
        dispatcher: Callable[[], Dispatcher],
        claims: Callable[[str | None, str], Claims | None],
        settle: Callable[[dict[str, Any], Claims | None], dict[str, Any]],
        resolve: Callable[[str], SessionInfo],
        floor_listening: Callable[[SessionInfo], bool],
        verified: bool,
        clock: Clock = SYSTEM,
    ) -> None:
        self._store, self.settings, self.receipts = store, settings, receipts
        self._dispatcher, self._claims, self._settle = dispatcher, claims, settle
        self._resolve, self._listening = resolve, floor_listening
        self.verified, self.clock = verified, clock

    @property
    def store(self) -> Store:
        return self._store()

    # -- checking ------------------------------------------------------------------------

    def _sender_data(
        self, item: dict[str, Any] | Message, claims: Any, handles: dict[str, str]
    ) -> dict[str, Any]:
        """``item`` as wire fields with its receiver and sender settled, as ``Bus.send`` does."""
        data = item.wire() if isinstance(item, Message) else item
        if not isinstance(data, dict):
            raise BadInput("a message must be a JSON object")
        if "to_id" not in data and data.get("to"):
            data = dict(data)
            to = str(data["to"])
            if to not in handles:
                handles[to] = self._resolve(to).session
            data["to_id"] = handles[to]
        return self._settle(data, claims)

    def _check_parties(self, checked: Checked) -> None:
        """Replace each message refused :func:`party_refusal` by its refusal; every named
        thread read in one round trip."""
        named = list(
            dict.fromkeys(c.thread for c in checked if isinstance(c, Message) and c.thread)
        )
        if not named:
            return
        got = self.store.thread_parties_many(named)
        found = {t: (json_list(raw), ex) for t, (raw, ex) in zip(named, got, strict=True)}
        for i, c in enumerate(checked):
            if isinstance(c, Message) and c.thread:
                refusal = party_refusal(c, *found[c.thread])
                if refusal is not None:
                    checked[i] = refusal

    def _check_ids(self, checked: Checked, given: list[bool]) -> None:
        """Replace each message whose caller-given id is another sender's by ``id_taken``
        (:mod:`bus.services.id_owner`); every given id looked up in one script call, the
        receipts of those found in one round trip more."""
        ids = [c.id for c, g in zip(checked, given, strict=True) if g and isinstance(c, Message)]
        if not ids:
            return
        store = self.store
        found = store.indexed(ids, now_ms())
        if not found:
            return
        pairs = list(found.items())
        owners: dict[str, id_owner.Owner] = {}
        rows = store.receipt_rows([(sid, msg_id) for msg_id, sid in pairs])
        for (msg_id, _sid), row in zip(pairs, rows, strict=True):
            if row[0]:
                owners[msg_id] = (row[0].get("from_session") or None, row[0].get("from") or None)
        for i, c in enumerate(checked):
            if given[i] and isinstance(c, Message):
                refusal = id_owner.id_refusal(c, owners.get(c.id))
                if refusal is not None:
                    checked[i] = refusal

    def _parse(self, items: Sequence[Any], claims: Claims | None) -> tuple[Checked, list[bool]]:
        """Each item's message or its refusal (bad input, a forged sender); whether the
        caller gave its id. No round trip (but a handle resolved)."""
        handles: dict[str, str] = {}
        out: Checked = []
        given: list[bool] = []
        for item in items:
            given.append(isinstance(item, Message) or (isinstance(item, dict) and "id" in item))
            try:
                out.append(parse_message(self._sender_data(item, claims, handles)))
            except BusError as exc:
                out.append(exc)
        return out, given

    def _check(self, items: Sequence[Any], claims: Claims | None) -> Checked:
        out, given = self._parse(items, claims)
        self._check_parties(out)
        self._check_ids(out, given)
        return out

    def check_each(self, items: Sequence[Any], token: str | None = None) -> Checked:
        """Validate each item on its own: its message, or the refusal it would get (bad
        input, a forged sender, ``not_a_party``, ``id_taken``)."""
        return self._check(items, self._claims(token, SCOPE_WRITE))

    def prepare(self, items: Sequence[Any], claims: Claims | None) -> list[Message]:
        """Validate a whole batch; raise one BadInput listing the bad items, writing nothing."""
        checked = self._check(items, claims)
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

    # -- the sender's rate -----------------------------------------------------------------

    def take_tokens(self, wanted: dict[str, int], *, partial: bool) -> dict[str, int] | None:
        """Take ``wanted[sender]`` tokens from each sender's bucket, all senders in one
        round trip: the number each got (``partial``: as many as there are, else all or
        none); ``None`` when no rate is set."""
        s = self.settings
        if s.send_rate <= 0:
            return None
        return self.store.take_tokens(wanted, s.send_rate, s.send_burst, partial=partial)

    def _take_whole(self, msgs: Sequence[Message], claims: Claims | None) -> None:
        """Every message's token or none: ``rate_limited`` with nothing written (tokens one
        sender's bucket gave are given back when another's could not)."""
        wanted = dict(Counter(sender_of(m, claims) for m in msgs))
        got = self.take_tokens(wanted, partial=False)
        if got is None:
            return
        short = [k for k, n in got.items() if n < wanted[k]]
        if not short:
            return
        s = self.settings
        self.store.give_tokens(got, s.send_rate, s.send_burst)
        raise over_rate(s, short[0], wanted[short[0]])

    def _rate_each(self, checked: Checked, claims: Claims | None) -> list[tuple[int, Message]]:
        """The messages of ``checked`` their senders' buckets hold tokens for, by index;
        each other one replaced by its ``rate_limited`` refusal."""
        good = [(i, c) for i, c in enumerate(checked) if isinstance(c, Message)]
        got = self.take_tokens(dict(Counter(sender_of(m, claims) for _i, m in good)), partial=True)
        if got is None:
            return good
        keep: list[tuple[int, Message]] = []
        for i, msg in good:
            sender = sender_of(msg, claims)
            if got.get(sender, 0) <= 0:
                checked[i] = over_rate(self.settings, sender)
                continue
            got[sender] -= 1
            keep.append((i, msg))
        return keep

    # -- sending -----------------------------------------------------------------------------

    def send_many(self, items: Sequence[Any], *, token: str | None = None) -> list[dict[str, Any]]:
        """Validate, rate and store a batch, each whole or not at all; one answer per item,
        in order (see the module)."""
        claims = self._claims(token, SCOPE_WRITE)
        msgs = self.prepare(items, claims)
        self._take_whole(msgs, claims)
        return self.store_many(msgs)

    def send_each(
        self, items: Sequence[Any], token: str | None = None
    ) -> list[dict[str, Any] | BusError]:
        """A stream's chunk (``send --jsonl``): each item answered on its own, its answer or
        its refusal (bad input, ``not_a_party``, ``id_taken``, ``rate_limited`` once its
        sender's bucket is empty), the good ones stored as one batch."""
        claims = self._claims(token, SCOPE_WRITE)
        return self._store_each(self._check(items, claims), claims)

    def send_stream(
        self, chunks: Iterator[Sequence[Any]], token: str | None = None
    ) -> Iterator[list[dict[str, Any] | BusError]]:
        """:meth:`send_each` of each chunk, in order; the next chunk is taken and parsed
        (read, JSON, validated: no round trip) on a thread of its own while this one is
        checked and written, so a stream's Python work overlaps its round trips. Each
        chunk's answers as soon as it is written."""
        claims = self._claims(token, SCOPE_WRITE)
        for checked, given in _ahead(lambda chunk: self._parse(chunk, claims), chunks):
            self._check_parties(checked)
            self._check_ids(checked, given)
            yield self._store_each(checked, claims)

    def _store_each(
        self, checked: Checked, claims: Claims | None
    ) -> list[dict[str, Any] | BusError]:
        keep = self._rate_each(checked, claims)
        out: list[dict[str, Any] | BusError | Message] = list(checked)
        for (i, _msg), answer in zip(keep, self.store_many([m for _i, m in keep]), strict=True):
            out[i] = answer
        return [o for o in out if not isinstance(o, Message)]

    def store_many(self, msgs: Sequence[Message]) -> list[dict[str, Any]]:
        """Store and route messages already validated and rated."""
        answers: list[dict[str, Any]] = []
        for start in range(0, len(msgs), WRITE_CHUNK):
            answers.extend(self._write(list(msgs[start : start + WRITE_CHUNK])))
        return answers

    def _standing(self, sid: str, found: wire.Found, now: int) -> Standing:
        host, state, seen, opened = found
        s = self.settings
        return (
            sid,
            host,
            recipient_state(state, seen or opened, now, s.stale_s),
            # Not listening on another host (Router.floor_listening), without a SessionInfo.
            host == s.host and self._listening(SessionInfo.model_construct(session=sid, host=host)),
            seen or None,
        )

    def _write(self, msgs: list[Message]) -> list[dict[str, Any]]:
        """Store ``msgs``: each receiver's appends made from the record it had when last
        read (:data:`~bus.services.batch_wire.RECORDS`), all in one round trip; a receiver
        whose record differs (or this process never read it) is written in a second, from
        the record the first one read."""
        # The records' times are the wall clock's, as Store.append writes them; the
        # recipients' states are by the bus's clock, as Router.post answers them.
        store, now, at = self.store, now_ms(), self.clock.now_ms()
        prefix = store.k.prefix
        per_sid: dict[str, list[int]] = {}
        threads: list[str] = []
        for i, msg in enumerate(msgs):
            if msg.verified is None:
                msg = msgs[i] = msg.model_copy(update={"verified": self.verified})
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
        head = [str(now), str(store.lock_ttl_ms), str(self.settings.max_unread)]
        for round_ in range(MAX_ROUNDS):
            if not todo and not bounced:
                break
            pipe = store.pipeline()
            queued = 0
            if round_ == 0:
                # The id -> receiver index first (the replies after it are the appends'):
                # one HSET per bucket the batch touches (bus.store.receipt_index).
                queued = store.queue_index(pipe, ((m.id, m.to_id) for m in msgs), now)
            standings: dict[str, Standing] = {}
            receivers: list[tuple[str, list[str], list[str]]] = []
            for sid in todo:
                said, found = wire.RECORDS.get((prefix, sid), wire.UNREAD)
                parts = ("", "")
                if found is not None:
                    standings[sid] = self._standing(sid, found, at)
                    parts = wire.answer_parts(standings[sid])
                if sid not in blobs:
                    blobs[sid] = wire.blobs(msgs, threads, per_sid[sid])
                ids = [msgs[i].id for i in per_sid[sid]]
                receivers.append((sid, ids, [said, *blobs[sid], *parts]))
            calls = store.queue_append_many(pipe, head, receivers)
            # The appends open the stored messages' receipts; the bounced ones open theirs
            # here (receipt_open.lua), and every message sent gets its outbox entry (ZADD
            # NX: a message sent again next round keeps the entry of the first).
            rows = wire.receipt_rows(msgs, threads, set(todo), set(bounced))
            self.receipts.open_many(pipe, rows, appended=True)
            replies = store.execute_loaded(pipe)
            todo, bounced = [], []
            for sids, reply in zip(calls, replies[queued : queued + len(calls)], strict=True):
                said_all = wire.told(reply)
                for r, sid in enumerate(sids, 1):
                    lines = said_all.get(r, [])
                    if lines and lines[0][0] == "s":  # its record, as read: nothing written
                        if wire.remember((prefix, sid), json.loads(lines[0][1])) is None:
                            bounced.extend(per_sid[sid])
                        else:
                            todo.append(sid)
                        continue
                    self._answered(
                        msgs,
                        threads,
                        per_sid[sid],
                        standings.get(sid),
                        lines,
                        answers,
                        refused,
                        due,
                    )
            for i in bounced:
                answers[i] = wire.bounced_answer(msgs[i])
        if todo or bounced:  # a record changed under every one of the rounds
            raise BusError(f"the receivers' records kept changing; send again: {todo[:3]}")
        for host, sids in due.items():  # a few tasks per host per batch, not one per receiver
            deliver_many(self._dispatcher(), host, sids)
        if refused:
            self._unwrite(refused, now)
        return [a for a in answers if a is not None]

    def _answered(
        self,
        msgs: list[Message],
        threads: list[str],
        idx: list[int],
        standing: Standing | None,
        lines: list[tuple[str, str]],
        answers: list[dict[str, Any] | None],
        refused: list[tuple[Message, str]],
        due: dict[str, list[str]],
    ) -> None:
        """One receiver's answers from what its append said: stored, each its template;
        a resend its first answer; ``inbox_full`` what did not fit; its dispatch noted."""
        if standing is None:  # never: the script writes only on a matching record
            raise RuntimeError(f"append_many.lua wrote {msgs[idx[0]].to_id} on no record")
        sid = standing[0]
        template = wire.template(standing)
        for i in idx:
            answers[i] = {**template, "id": msgs[i].id, "thread": threads[i]}
        for kind, rest in lines:
            if kind == "d":
                due.setdefault(standing[1], []).append(sid)
                continue
            n, _, prior = rest.partition(" ")
            i = idx[int(n) - 1]
            if prior == "-1":
                cap = self.settings.max_unread
                answers[i] = {**inbox_full(sid, cap).to_json(), "id": msgs[i].id}
                refused.append((msgs[i], sid))
            else:
                answers[i] = {**packing.restore(prior, sid, msgs[i].id), "duplicate": True}

    def _unwrite(self, refused: list[tuple[Message, str]], now: int) -> None:
        """Messages refused ``inbox_full`` keep no recipient index and no outbox entry (as
        ``Store.append`` and ``Bus.post`` leave a refused send); only on a refusal."""
        self.store.unindex_many((msg.id for msg, _sid in refused), now)
        self.receipts.unlist_refused(refused)
