"""Batched ingest: ``Bus.send_many``, ``inbox send --jsonl`` and ``POST /v1/send/batch``.

A batch is validated whole before anything is written: one bad item refuses the whole
batch (a :class:`~bus.core.errors.BadInput` naming each bad item by its index), so a caller
never has to work out which half of a batch went in. Then:

- the receivers' messages are appended by ``append_many.lua`` (the batched
  ``append.lua``: same keys, records and answers), which also opens each stored
  message's receipt: one call for several receivers on a standalone server, one per
  receiver on a cluster; all calls in one pipeline, run without redis-py's ``SCRIPT
  EXISTS`` round trip and packed without redis-py's per-argument packing
  (:meth:`~bus.store.many.RoundTrips.execute_loaded`). A receiver's messages go as one
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

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from functools import partial
from typing import TYPE_CHECKING, Any

from bus.core.clock import SYSTEM, Clock
from bus.core.durability import level_of
from bus.core.errors import BadInput, BusError, RateLimited, Refused
from bus.core.models import Message, SessionInfo, now_ms, parse_message
from bus.store.packing import json_list
from bus.trust.tokens import SCOPE_WRITE, Claims

from . import batch_wire as wire
from . import id_owner
from .batch_wire import inbox_full
from .batch_write import BatchWriter, Job
from .overlap import Ahead, Writer

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
        self._store, self.settings = store, settings
        self._claims, self._settle, self._resolve = claims, settle, resolve
        self.writes = BatchWriter(
            store,
            settings,
            receipts=receipts,
            dispatcher=dispatcher,
            floor_listening=floor_listening,
            verified=verified,
            clock=clock,
        )

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
        got = self.store.inbox.thread_parties_many(named)
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
        found = store.queue.indexed(ids, now_ms())
        if not found:
            return
        pairs = list(found.items())
        owners: dict[str, id_owner.Owner] = {}
        rows = store.receipts.receipt_rows([(sid, msg_id) for msg_id, sid in pairs])
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
        return self.store.queue.take_tokens(wanted, s.send_rate, s.send_burst, partial=partial)

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
        self.store.queue.give_tokens(got, s.send_rate, s.send_burst)
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

    def send_many(
        self, items: Sequence[Any], *, token: str | None = None, durability: str | None = None
    ) -> list[dict[str, Any]]:
        """Validate, rate and store a batch, each whole or not at all; one answer per item,
        in order (see the module), confirmed at ``durability`` (else ``INBOX_DURABILITY``)."""
        level = level_of(durability, self.settings.durability)
        claims = self._claims(token, SCOPE_WRITE)
        msgs = self.prepare(items, claims)
        self._take_whole(msgs, claims)
        return self.store_many(msgs, durability=level)

    def send_each(
        self, items: Sequence[Any], token: str | None = None, durability: str | None = None
    ) -> list[dict[str, Any] | BusError]:
        """A stream's chunk (``send --jsonl``): each item answered on its own, its answer or
        its refusal (bad input, ``not_a_party``, ``id_taken``, ``rate_limited`` once its
        sender's bucket is empty), the good ones stored as one batch."""
        level = level_of(durability, self.settings.durability)
        claims = self._claims(token, SCOPE_WRITE)
        return self._store_each(self._check(items, claims), claims, level)

    def send_stream(
        self,
        chunks: Iterator[Sequence[Any]],
        token: str | None = None,
        durability: str | None = None,
    ) -> Iterator[list[dict[str, Any] | BusError]]:
        """:meth:`send_each` of each chunk, in order, each chunk's answers as soon as it is
        written. The next chunk is taken and parsed (read, JSON, validated) on a thread
        of its own, and written on another while the one after is checked and built, so
        the stream's Python work overlaps its round trips; a chunk whose ids the chunk
        being written holds is checked after it (``id_taken`` as one after the other)."""
        level = level_of(durability, self.settings.durability)
        claims = self._claims(token, SCOPE_WRITE)
        ahead = Ahead(lambda chunk: self._parse(chunk, claims), chunks)
        flight: tuple[Future[list[dict[str, Any] | BusError]], set[str]] | None = None
        with Writer() as writer:
            while True:
                if flight is not None and not ahead.ready():  # a producer may wait on it
                    yield flight[0].result()
                    flight = None
                more, parsed = ahead.get()
                if not more or parsed is None:
                    break
                checked, given = parsed
                ids = {
                    c.id
                    for c, g in zip(checked, given, strict=True)
                    if g and isinstance(c, Message)
                }
                if flight is not None and ids & flight[1]:
                    yield flight[0].result()
                    flight = None
                self._check_parties(checked)
                self._check_ids(checked, given)
                keep = self._rate_each(checked, claims)
                msgs = [m for _i, m in keep]
                job = self.writes.build(msgs, level) if len(msgs) <= WRITE_CHUNK else msgs
                done = writer.submit(partial(self._write_placed, checked, keep, job, level))
                if flight is not None:
                    yield flight[0].result()
                sent = {m.id for _i, m in keep}
                flight = (done, sent)
            if flight is not None:
                yield flight[0].result()

    def _store_each(
        self, checked: Checked, claims: Claims | None, level: str
    ) -> list[dict[str, Any] | BusError]:
        keep = self._rate_each(checked, claims)
        answers = self.store_many([m for _i, m in keep], durability=level)
        return self._placed(checked, keep, answers)

    def _write_placed(
        self,
        checked: Checked,
        keep: list[tuple[int, Message]],
        job: Job | list[Message],
        level: str,
    ) -> list[dict[str, Any] | BusError]:
        """A stream chunk's write (built, or too large to be one), its items answered."""
        if isinstance(job, list):
            answers = self.store_many(job, durability=level)
        else:
            answers = self.writes.finish(job)
        return self._placed(checked, keep, answers)

    @staticmethod
    def _placed(
        checked: Checked, keep: list[tuple[int, Message]], answers: list[dict[str, Any]]
    ) -> list[dict[str, Any] | BusError]:
        """Each item's answer in order: the stored ones' from ``answers``, the refusals."""
        out: list[dict[str, Any] | BusError | Message] = list(checked)
        for (i, _msg), answer in zip(keep, answers, strict=True):
            out[i] = answer
        return [o for o in out if not isinstance(o, Message)]

    def store_many(
        self, msgs: Sequence[Message], *, durability: str = "memory"
    ) -> list[dict[str, Any]]:
        """Store and route messages already validated and rated, :data:`WRITE_CHUNK` a
        pipeline: each chunk built while the one before is written (one writer thread,
        in order; a chunk that fails stops the ones after it), each confirmed at
        ``durability`` in its own round trip."""
        chunks = [list(msgs[at : at + WRITE_CHUNK]) for at in range(0, len(msgs), WRITE_CHUNK)]
        if len(chunks) <= 1:
            return self.writes.write(chunks[0], durability) if chunks else []
        writes = self.writes
        with Writer() as writer:
            done = [
                writer.submit(partial(writes.finish, writes.build(c, durability))) for c in chunks
            ]
        return [a for d in done for a in d.result()]
