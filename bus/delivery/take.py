"""The take stage's parts: a read's entries into the inbox, or written raw, once each.

The engine (:mod:`bus.delivery.engine`) takes each read of a session's queue one of two
ways: into the inbox (:func:`inbox_entries`, then :meth:`bus.delivery.inbox.Inbox.ingest`,
idempotent, so the cursor moves once per read), or raw, one line per message
(:func:`take_raw`: inbox switched off, or the session closing). A raw line is written at
most once even when the worker is killed mid-write: the entry being written is recorded
first (``rawflight``), and a redo that finds the record checks the floor for the id
before writing it again (:func:`recover_raw`).
"""

from __future__ import annotations

import functools
import json
import logging
from typing import TYPE_CHECKING, Any

from bus.core.models import SessionInfo

from .report import DeliveryReport

if TYPE_CHECKING:
    from bus.store.store import Store

    from .floor import Floor
    from .lease import Lease
    from .raw_lines import RawLines

log = logging.getLogger(__name__)

# Entries a read takes (the start's, each snapshot's).
BATCH = 200


def raw_mode(info: SessionInfo | None, inbox_default: bool) -> bool:
    """Raw delivery (one line per message): inbox switched off, or closing/closed.
    ``inbox_default``: the inbox is on for a session that names no ``agent_inbox``."""
    if info is None:
        return True
    if info.state in ("closing", "closed"):
        return True
    if info.agent_inbox is not None:
        return not info.agent_inbox
    return not inbox_default


def withdrawn(answer: dict[str, Any] | None) -> bool:
    """Whether a queue entry's send answer says its sender withdrew it (it is skipped)."""
    return (answer or {}).get("state") == "withdrawn"


def inbox_entries(
    rows: list[tuple[str, dict[str, str]]],
    answers: list[dict[str, Any] | None],
    report: DeliveryReport,
    msgs: list[dict[str, Any]] | None = None,
    facts: list[str] | None = None,
) -> tuple[list[tuple[dict[str, Any], int]], list[str]]:
    """The entries of a read that go into the inbox, as :meth:`bus.delivery.inbox.Inbox.ingest`
    takes them (``(message, arrival ms)``, the stream entry's id being the Redis clock when
    the bus stored it) with each one's wire JSON; a withdrawn one is skipped and counted.
    ``msgs``: the entries' messages already parsed; ``facts``: filled with each one's
    wake facts as its sender's send kept them (the entry's ``w``, ``""`` when none)."""
    batch: list[tuple[dict[str, Any], int]] = []
    raws: list[str] = []
    for n, ((eid, fields), answer) in enumerate(zip(rows, answers, strict=True)):
        if withdrawn(answer):
            report.skipped += 1
            continue
        batch.append(
            (msgs[n] if msgs is not None else json.loads(fields["m"]), int(eid.split("-")[0]))
        )
        raws.append(fields["m"])
        if facts is not None:
            facts.append(fields.get("w", ""))
    return batch, raws


def take_raw(
    store: Store,
    raw: RawLines,
    lease: Lease,
    rows: list[tuple[str, dict[str, str]]],
    answers: list[dict[str, Any] | None],
    report: DeliveryReport,
) -> bool:
    """Write each entry of a read as its own line, the lease checked before each (past it
    another delivery may have started: not race it); a withdrawn one skipped. The
    in-flight record goes first, the cursor after each line: a redo finds the record and
    looks for the line on the floor (:func:`recover_raw`) before writing it again. False
    when the lease was lost (nothing more may be written)."""
    sid = lease.sid
    for (eid, fields), answer in zip(rows, answers, strict=True):
        if not lease.held():
            return False
        if withdrawn(answer):
            report.skipped += 1
            store.queue.advance(sid, eid)
            continue
        msg = json.loads(fields["m"])
        raw.write(
            sid,
            msg,
            report,
            unsure=False,
            before=functools.partial(store.queue.set_rawflight, sid, eid, msg["id"]),
            after=functools.partial(store.queue.advance, sid, eid),
        )
    return True


def recover_raw(
    store: Store, floor: Floor, sid: str, report: DeliveryReport, flight: dict[str, str] | None
) -> None:
    """Finish a raw write a killed worker left: skip it if its line is on the floor."""
    if not flight:
        return
    if floor.contains_id(sid, flight["id"]):
        log.info(
            "delivery for %s: %s was written before a crash; not writing it again",
            sid,
            flight["id"],
        )
        store.queue.advance(sid, flight["stream_id"])
        report.skipped += 1


__all__ = ["BATCH", "inbox_entries", "raw_mode", "recover_raw", "take_raw", "withdrawn"]
