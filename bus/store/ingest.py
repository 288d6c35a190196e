"""The batched ingest's store side (:mod:`bus.services.send_many`): the senders' rate
buckets (``rate.lua``), the recipient index of caller-chosen ids (``ids_indexed.lua``) and
the appends (``append_many.lua``), each a few calls however large the batch.

A part of the store's ``queue`` aggregate (:class:`bus.store.store.Queue`); the same contract:
answers in the callers' order, one round trip per call here, a missing thing reads empty.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from . import receipt_index
from .base import StorePart
from .keys import IDS_KEEP_DAYS

# The keys of one receiver in an append_many.lua call, in its order (KEYS[b+1..b+8]).
APPEND_KEYS = ("stream", "ids", "threads", "pending", "trim", "events", "msgs", "session")
# Messages an append_many.lua call takes on a standalone server before the next call
# starts (whole receivers): bounds the time one call holds Redis, so other clients'
# commands wait at most one call.
CALL_MESSAGES = 128


class IngestStore(StorePart):
    """What a batch send reads and writes, batched."""

    cluster: bool
    lock_ttl_ms: int

    # -- the senders' rate -------------------------------------------------------------

    def take_tokens(
        self, wanted: dict[str, int], rate: float, burst: float, *, partial: bool
    ) -> dict[str, int]:
        """Take ``wanted[sender]`` tokens from each sender's bucket (``rate`` a second,
        ``burst`` at most), all senders in one round trip: the number each got
        (``partial``: as many as there are, else all or none)."""
        senders = [k for k, n in wanted.items() if n > 0]
        flag = "1" if partial else "0"
        calls = [
            self.script_call("rate", [self.k.bucket(s)], [rate, burst, wanted[s], flag])
            for s in senders
        ]
        return {s: int(n) for s, n in zip(senders, self.run_scripts(calls), strict=True)}

    def give_tokens(self, given: dict[str, int], rate: float, burst: float) -> None:
        """Give ``given[sender]`` tokens back to each sender's bucket (a batch refused
        whole after some buckets paid), in one round trip."""
        calls = [
            self.script_call("rate", [self.k.bucket(s)], [rate, burst, -n])
            for s, n in given.items()
            if n > 0
        ]
        if calls:
            self.run_scripts(calls)

    # -- caller-chosen ids ---------------------------------------------------------------

    def indexed(self, msg_ids: Iterable[str], now_ms: int) -> dict[str, str]:
        """The session each of ``msg_ids`` was appended to, for those in the recipient
        index (:mod:`bus.store.receipt_index`) within its retention, newest day first:
        one ``ids_indexed.lua`` call on a standalone server (one per bucket on a cluster,
        each its own slot), in one round trip, whose reply names only the ids found."""
        by_bucket: dict[int, list[str]] = {}
        for msg_id in dict.fromkeys(msg_ids):
            by_bucket.setdefault(receipt_index.bucket_of(msg_id), []).append(msg_id)
        if not by_bucket:
            return {}
        day = receipt_index.day_of(now_ms)
        keys: list[str] = []
        args: list[str] = []
        for b, ids in by_bucket.items():
            blob = "".join(f"{i}\n" for i in ids)
            for back in range(IDS_KEEP_DAYS + 1):
                keys.append(self.k.rcpt_bucket(day - back, b))
                args.append(blob)
        if self.cluster:  # a bucket's days share a slot: a call per bucket
            days = IDS_KEEP_DAYS + 1
            calls = [
                self.script_call("ids_indexed", keys[at : at + days], args[at : at + days])
                for at in range(0, len(keys), days)
            ]
        else:
            calls = [self.script_call("ids_indexed", keys, args)]
        found: dict[str, str] = {}
        for reply in self.run_scripts(calls):
            pairs = list(reply or [])
            for n in range(0, len(pairs), 2):
                found.setdefault(str(pairs[n]), str(pairs[n + 1]))
        return found

    # -- the appends -----------------------------------------------------------------------

    def queue_index(self, pipe: Any, pairs: Iterable[tuple[str, str]], now_ms: int) -> int:
        """Queue on ``pipe`` the recipient index of each ``(message id, session)``
        (:func:`bus.store.receipt_index.index`); how many commands were queued."""
        return receipt_index.index(pipe, self.k, pairs, now_ms)

    def queue_append_many(
        self, pipe: Any, head: list[Any], receivers: list[tuple[str, list[str], list[str]]]
    ) -> list[list[str]]:
        """Queue on ``pipe`` the ``append_many.lua`` calls storing ``receivers`` (each
        ``(sid, its message ids, its five arguments)``, ``head`` the calls' first three):
        one call per receiver on a cluster (a call's keys in one slot), else one per
        :data:`CALL_MESSAGES` messages or so (a swarm's batch has a few a receiver: a call each
        would be hundreds of script calls a batch, their setup and replies). Bare ``EVALSHA`` calls: run
        the pipeline with :meth:`~bus.store.many.RoundTrips.execute_loaded`. Answers each
        call's receivers, in order."""
        sha = self.script("append_many").sha
        calls: list[list[str]] = []
        keys: list[str] = []
        args: list[Any] = []
        sids: list[str] = []
        count = 0
        for sid, msg_ids, five in receivers:
            keys.extend(self.k.s_many(sid, APPEND_KEYS))
            keys.extend(self.k.receipts(sid, msg_ids))
            args.extend(five)
            sids.append(sid)
            count += len(msg_ids)
            if self.cluster or count >= CALL_MESSAGES:
                pipe.evalsha(sha, str(len(keys)), *keys, *head, *args)
                calls.append(sids)
                keys, args, sids, count = [], [], [], 0
        if sids:
            pipe.evalsha(sha, str(len(keys)), *keys, *head, *args)
            calls.append(sids)
        return calls
