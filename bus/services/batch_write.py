"""Writing a batch send's chunk (:mod:`bus.services.send_many`): built, then sent.

A chunk's write is built (:meth:`BatchWriter.build`: its messages by receiver, their
threads and wire lines, its first round trip queued from each receiver's record as this
process last read it, :data:`bus.services.batch_wire.RECORDS`) apart from being sent
(:meth:`BatchWriter.finish`), so the next chunk is built while this one is written. A
receiver whose record differs (or that this process never read) writes nothing in the
first round trip and is written (or bounced) in a second, from the record read.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bus.core.clock import SYSTEM, Clock
from bus.core.errors import BusError
from bus.core.models import Message, SessionInfo, now_ms
from bus.core.receipt_rules import recipient_state
from bus.core.status_view import host_state
from bus.core.threads import thread_id, thread_key
from bus.delivery.dispatch import request_many
from bus.store import packing
from bus.store.beats import beat_reply

from . import batch_wire as wire
from .batch_wire import Standing, inbox_full

if TYPE_CHECKING:
    from bus.core.settings import Settings
    from bus.delivery.dispatch import Dispatcher
    from bus.delivery.receipts import Receipts
    from bus.store.store import Store

MAX_ROUNDS = 8


@dataclass
class Job:
    """One chunk's write (:meth:`BatchWriter.build`, :meth:`BatchWriter.finish`): its
    messages by receiver, their threads, the round trip queued and what it answered."""

    msgs: list[Message]
    now: int
    at: int
    prefix: str
    per_sid: dict[str, list[int]] = field(default_factory=dict)
    threads: list[str] = field(default_factory=list)
    head: list[str] = field(default_factory=list)
    todo: list[str] = field(default_factory=list)
    bounced: list[int] = field(default_factory=list)
    blobs: dict[str, tuple[str, str]] = field(default_factory=dict)
    pipe: Any = None
    queued: int = 0
    calls: list[list[str]] = field(default_factory=list)
    standings: dict[str, Standing] = field(default_factory=dict)
    answers: list[dict[str, Any] | None] = field(default_factory=list)
    refused: list[tuple[Message, str]] = field(default_factory=list)
    due: dict[str, list[str]] = field(default_factory=dict)
    # The level each round trip is confirmed at (bus.core.durability), once per round trip.
    durability: str = "memory"
    # The receivers' hosts whose beats the round queued last, and each host's state read.
    beat_hosts: list[str] = field(default_factory=list)
    host_states: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.answers = [None] * len(self.msgs)


class BatchWriter:
    """Builds and sends chunks' writes for one store (providers are called on use)."""

    def __init__(
        self,
        store: Callable[[], Store],
        settings: Settings,
        *,
        receipts: Receipts,
        dispatcher: Callable[[], Dispatcher],
        floor_listening: Callable[[SessionInfo], bool],
        verified: bool,
        clock: Clock = SYSTEM,
    ) -> None:
        self._store, self.settings, self.receipts = store, settings, receipts
        self._dispatcher, self._listening = dispatcher, floor_listening
        self.verified, self.clock = verified, clock

    @property
    def store(self) -> Store:
        return self._store()

    def write(self, msgs: list[Message], durability: str = "memory") -> list[dict[str, Any]]:
        """:meth:`build` and :meth:`finish` one chunk."""
        return self.finish(self.build(msgs, durability))

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

    def build(self, msgs: list[Message], durability: str = "memory") -> Job:
        """A chunk's write, its first round trip queued, not sent: each receiver's appends
        made from the record it had when last read (:data:`~bus.services.batch_wire.RECORDS`);
        :meth:`finish` sends it."""
        # The records' times are the wall clock's, as Store.queue.append writes them; the
        # recipients' states are by the bus's clock, as Router.post answers them.
        store, now = self.store, now_ms()
        job = Job(msgs, now, self.clock.now_ms(), self.settings.key_prefix, durability=durability)
        for i, msg in enumerate(msgs):
            if msg.verified is None:
                msg = msgs[i] = msg.model_copy(update={"verified": self.verified})
            job.per_sid.setdefault(msg.to_id, []).append(i)
            key = thread_key(
                thread=msg.thread, pr=msg.pr, topic=msg.topic, sender=msg.from_, text=msg.text
            )
            job.threads.append(thread_id(msg.to_id, key))  # cached: the same in every batch
        job.todo = list(job.per_sid)
        # As text: the call packs without converting a number (bus.store.many.pack_commands).
        job.head = [str(now), str(store.lock_ttl_ms), str(self.settings.max_unread)]
        if job.todo:
            self._queue_round(job, first=True)
        return job

    def _queue_round(self, job: Job, *, first: bool = False) -> None:
        store, msgs = self.store, job.msgs
        job.pipe = pipe = store.pipeline()
        job.queued = 0
        if first:
            # The id -> receiver index first (the replies after it are the appends'):
            # one HSET per bucket the batch touches (bus.store.receipt_index).
            job.queued = store.queue.queue_index(pipe, ((m.id, m.to_id) for m in msgs), job.now)
        job.standings = {}
        receivers: list[tuple[str, list[str], list[str]]] = []
        for sid in job.todo:
            said, found = wire.RECORDS.get((job.prefix, sid), wire.UNREAD)
            parts = ("", "")
            if found is not None:
                job.standings[sid] = self._standing(sid, found, job.at)
                parts = wire.answer_parts(job.standings[sid])
            if sid not in job.blobs:
                job.blobs[sid] = wire.blobs(msgs, job.threads, job.per_sid[sid])
            ids = [msgs[i].id for i in job.per_sid[sid]]
            receivers.append((sid, ids, [said, *job.blobs[sid], *parts]))
        job.calls = store.queue.queue_append_many(pipe, job.head, receivers)
        # The appends open the stored messages' receipts; the bounced ones open theirs
        # here (receipt_open.lua), and every message sent gets its outbox entry (ZADD
        # NX: a message sent again next round keeps the entry of the first).
        rows = wire.receipt_rows(msgs, job.threads, set(job.todo), set(job.bounced))
        self.receipts.open_many(pipe, rows, appended=True)
        # Each receiver's host up or down (its worker's beat), read in the same round
        # trip as a single send reads it (Router.post), last in the pipeline.
        job.beat_hosts = sorted({st[1] for st in job.standings.values()} - set(job.host_states))
        store.schedule.queue_beats(pipe, job.beat_hosts)

    def finish(self, job: Job) -> list[dict[str, Any]]:
        """Send a built chunk: one round trip when the records it was built from stand; a
        receiver whose record differs (or this process never read it) is written in a
        second, from the record the first one read. Each round trip is confirmed at the
        job's durability level in itself (:class:`~bus.core.errors.NotDurable` naming the
        chunk's ids when not); each stored or resent item's answer says it (``durable``)."""
        msgs = job.msgs
        for round_ in range(MAX_ROUNDS):
            if not job.todo and not job.bounced:
                break
            if round_:
                self._queue_round(job)
            ids = [m.id for m in msgs]
            replies = self.store.execute_durable(
                job.pipe, job.durability, self.settings.durability_timeout_s, ids, list(job.per_sid)
            )
            job.todo, job.bounced = [], []
            beats = replies[len(replies) - len(job.beat_hosts) :] if job.beat_hosts else []
            for host, raw in zip(job.beat_hosts, beats, strict=True):
                job.host_states[host] = host_state(
                    beat_reply(raw), job.at, self.settings.host_down_s
                )
            got = replies[job.queued : job.queued + len(job.calls)]
            for sids, reply in zip(job.calls, got, strict=True):
                said_all = wire.told(reply)
                for r, sid in enumerate(sids, 1):
                    lines = said_all.get(r, [])
                    if lines and lines[0][0] == "s":  # its record, as read: nothing written
                        if wire.remember((job.prefix, sid), json.loads(lines[0][1])) is None:
                            job.bounced.extend(job.per_sid[sid])
                        else:
                            job.todo.append(sid)
                        continue
                    self._answered(job, job.per_sid[sid], job.standings.get(sid), lines)
            for i in job.bounced:
                job.answers[i] = wire.bounced_answer(msgs[i])
        if job.todo or job.bounced:  # a record changed under every one of the rounds
            raise BusError(f"the receivers' records kept changing; send again: {job.todo[:3]}")
        for host, sids in job.due.items():  # a few tasks per host per batch, not one each
            request_many(self._dispatcher(), host, sids)
        if job.refused:
            self._unwrite(job.refused, job.now)
        kept = {m.id for m, _sid in job.refused}
        for answer in job.answers:
            if answer is not None and answer.get("ok", True) and answer.get("id") not in kept:
                answer["durable"] = job.durability
                self._host_state(job, answer)
        return [a for a in job.answers if a is not None]

    def _answered(
        self, job: Job, idx: list[int], standing: Standing | None, lines: list[tuple[str, str]]
    ) -> None:
        """One receiver's answers from what its append said: stored, each its template;
        a resend its first answer; ``inbox_full`` what did not fit; its dispatch noted."""
        msgs = job.msgs
        if standing is None:  # never: the script writes only on a matching record
            raise RuntimeError(f"append_many.lua wrote {msgs[idx[0]].to_id} on no record")
        sid = standing[0]
        template = wire.template(standing)
        for i in idx:
            job.answers[i] = {**template, "id": msgs[i].id, "thread": job.threads[i]}
        for kind, rest in lines:
            if kind == "d":
                job.due.setdefault(standing[1], []).append(sid)
                continue
            n, _, prior = rest.partition(" ")
            i = idx[int(n) - 1]
            if prior == "-1":
                cap = self.settings.max_unread
                job.answers[i] = {**inbox_full(sid, cap).to_json(), "id": msgs[i].id}
                job.refused.append((msgs[i], sid))
            else:
                job.answers[i] = {**packing.restore(prior, sid, msgs[i].id), "duplicate": True}

    @staticmethod
    def _host_state(job: Job, answer: dict[str, Any]) -> None:
        """A stored message's answer (a resend's too) says its receiver's host state, as
        a single send's does; the answers kept in ``ids`` do not (it is read per send)."""
        rcpt = answer.get("recipient")
        if answer.get("state") == "stored" and isinstance(rcpt, dict):
            state = job.host_states.get(str(rcpt.get("host") or ""))
            if state is not None:
                rcpt["host_state"] = state

    def _unwrite(self, refused: list[tuple[Message, str]], now: int) -> None:
        """Messages refused ``inbox_full`` keep no recipient index and no outbox entry (as
        ``Store.queue.append`` and ``Bus.post`` leave a refused send); only on a refusal."""
        self.store.queue.unindex_many((msg.id for msg, _sid in refused), now)
        self.receipts.unlist_refused(refused)
