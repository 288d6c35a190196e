"""The general loop of one session's run: through its whole queue, raw lines included.

The engine (:mod:`bus.delivery.engine`) runs the common shape of a run in its batched
steps; a run that needs more comes here from where it stands
(:func:`continue_delivery` after a start, :func:`continue_after` after a batched
snapshot that read more): every stream entry after the cursor, read by batches of
:data:`BATCH`, either written raw (its own line on the socket or floor) or taken into the
inbox, then the plan (:meth:`bus.delivery.inbox.Inbox.after_delivery`) and the unlock. A raw
line is written at most once even when the worker is killed mid-write: the entry being
written is recorded first (``rawflight``), and a redo that finds the record checks the
floor for the id before writing again.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any, Protocol

from bus.core.models import SessionInfo

from .lease import Lease
from .report import DeliveryReport

if TYPE_CHECKING:
    from bus.core.settings import Settings
    from bus.store.delivery import DeliverySnapshot, DeliveryStart
    from bus.store.store import Store
    from bus.telemetry.metrics import Metrics

    from .dispatch import Dispatcher
    from .floor import Floor
    from .inbox import Inbox

log = logging.getLogger(__name__)

BATCH = 200


class DeliveryHost(Protocol):
    """What a host's delivery uses: the store, the floor, the inbox, metrics, dispatcher."""

    settings: Settings
    floor: Floor
    inbox: Inbox

    @property
    def store(self) -> Store: ...

    @property
    def metrics(self) -> Metrics: ...

    @property
    def dispatcher(self) -> Dispatcher: ...


def raw_mode(bus: DeliveryHost, info: SessionInfo | None) -> bool:
    """Raw delivery (one line per message): inbox switched off, or closing/closed."""
    if info is None:
        return True
    if info.state in ("closing", "closed"):
        return True
    if info.agent_inbox is not None:
        return not info.agent_inbox
    return not bus.settings.agent_inbox


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


def continue_delivery(
    bus: DeliveryHost, sid: str, start: DeliveryStart, lease: Lease | None = None
) -> DeliveryReport:
    """A delivery after its start (the lock taken, the first read made, as
    :meth:`~bus.store.store.Store.begin_delivery` answered; ``lease``: its lease if adopted),
    through the whole queue, then the plan; the lock released at the end."""
    if lease is None:
        lease = Lease.adopt(bus.store, sid, start.token, start.sent_at)
    return _run(bus, sid, lease, start=start)


def continue_after(
    bus: DeliveryHost, sid: str, lease: Lease, snap: DeliverySnapshot
) -> DeliveryReport:
    """A batched run whose snapshot read more entries (sent while its batch ran, or past
    its first read): the rest of the queue as :func:`continue_delivery` takes it, from
    the snapshot, so a long queue still ends in one plan and one notice."""
    return _run(bus, sid, lease, snap=snap)


def _run(
    bus: DeliveryHost,
    sid: str,
    lease: Lease,
    *,
    start: DeliveryStart | None = None,
    snap: DeliverySnapshot | None = None,
) -> DeliveryReport:
    report = DeliveryReport(session=sid)
    store = bus.store
    report.lease = lease
    finished = False
    try:
        answers: list[dict[str, Any] | None] | None
        if snap is not None:
            rows, info, answers = snap.rows, snap.info, None
        elif start is not None and start.rows is None:  # a raw line was in flight
            _recover_raw(bus, sid, report, start.rawflight)
            rows = store.read_after(sid, store.cursor(sid), BATCH)
            info, answers = (store.get_session(sid) if rows else None), None
        else:
            assert start is not None and start.rows is not None
            rows, info, answers = start.rows, start.info, start.answers
        while True:
            advance_to = read_from = None
            if rows:
                msgs = [json.loads(fields["m"]) for _eid, fields in rows]
                if answers is None:
                    answers = store.first_answers(sid, [m["id"] for m in msgs])
                raw = raw_mode(bus, info)
                if not _take(bus, sid, lease, rows, msgs, answers, raw, info, report):
                    report.busy = True
                    return report
                # Taking a message into the inbox is idempotent, so the cursor moves once
                # per batch (with the snapshot below); a raw line moves it one by one (it
                # must be written once).
                read_from = rows[-1][0]
                advance_to = None if raw else read_from
            # The fence, the cursor's move, the plan's reads and the next entries (sent
            # while this batch was taken in) in one round trip.
            snap = store.delivery_snapshot(
                sid, lease.token, advance_to=advance_to, read_after=read_from, count=BATCH
            )
            if not lease.confirmed(snap.held, snap.sent_at):
                report.busy = True
                return report
            if not snap.rows:
                break
            rows, info, answers = snap.rows, snap.info, None
        if report.raw or report.inbox:
            bus.metrics.incr("messages_in", report.raw + report.inbox)
        bus.inbox.after_delivery(sid, report, snap)
        store.set_trim_floor(sid, bus.settings.stream_keep, snap.stream_len)
        finished = True
    finally:
        # The hand-off flag goes with the unlock only after a whole run (bus.delivery.engine).
        report.again = lease.release(take_again=finished)
        report.lease = None
    return report


def _take(
    bus: DeliveryHost,
    sid: str,
    lease: Lease,
    rows: list[tuple[str, dict[str, str]]],
    msgs: list[dict[str, Any]],
    answers: list[dict[str, Any] | None],
    raw: bool,
    info: SessionInfo | None,
    report: DeliveryReport,
) -> bool:
    """Take one batch of entries: each raw line written, or all into the inbox. False
    when the lease was lost first (nothing more may be written)."""
    if not raw:
        facts: list[str] = []
        batch, raws = inbox_entries(rows, answers, report, msgs, facts)
        # Ingest writes only Redis, idempotently: a confirmation within the fresh window
        # (the lock just taken, or the last snapshot) is the fence (bus.delivery.lease).
        if not lease.held(fresh=True):
            return False
        bus.inbox.ingest(sid, batch, info, report, raws=raws, facts=facts)
        return True
    store = bus.store
    for (eid, _fields), msg, answer in zip(rows, msgs, answers, strict=True):
        if not lease.held():
            return False  # past the lease another delivery may have started: not race it
        if withdrawn(answer):
            report.skipped += 1
            store.advance(sid, eid)
        else:
            _write_raw(bus, sid, eid, msg, report)
    return True


def _write_raw(
    bus: DeliveryHost, sid: str, eid: str, msg: dict[str, Any], report: DeliveryReport
) -> None:
    """The in-flight record goes first, the cursor after: a redo finds the record and
    looks for the line on the floor (:func:`_recover_raw`) before writing it again."""
    store = bus.store
    bus.inbox.raw.write(
        sid,
        msg,
        report,
        unsure=False,
        before=lambda: store.set_rawflight(sid, eid, msg["id"]),
        after=lambda: store.advance(sid, eid),
    )


def _recover_raw(
    bus: DeliveryHost, sid: str, report: DeliveryReport, flight: dict[str, str] | None
) -> None:
    """Finish a raw write a killed worker left: skip it if its line is on the floor."""
    if not flight:
        return
    if bus.floor.contains_id(sid, flight["id"]):
        log.info(
            "delivery for %s: %s was written before a crash; not writing it again",
            sid,
            flight["id"],
        )
        bus.store.advance(sid, flight["stream_id"])
        report.skipped += 1


__all__ = [
    "BATCH",
    "DeliveryHost",
    "DeliveryReport",
    "continue_after",
    "continue_delivery",
    "inbox_entries",
    "raw_mode",
    "withdrawn",
]
