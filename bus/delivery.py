"""The host worker's job for one session: take its queue and deliver it locally.

``deliver_session`` holds the session's lock (a short lease, :mod:`bus.lease`), takes
every stream entry after the cursor, and for each one either writes it raw (its own line on the socket or floor) or
hands it to the inbox. A raw line is written at most once even when the worker is
killed mid-write: the entry being written is recorded first (``rawflight``), and a redo
that finds the record checks the floor for the id before writing again.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any, Protocol

from .lease import Lease
from .models import SessionInfo
from .report import DeliveryReport

if TYPE_CHECKING:
    from .dispatch import Dispatcher
    from .floor import Floor
    from .inbox import Inbox
    from .metrics import Metrics
    from .settings import Settings
    from .store import Store
    from .store_delivery import DeliveryStart

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


def deliver_session(bus: DeliveryHost, sid: str) -> DeliveryReport:
    """Deliver everything queued for ``sid``; ``busy`` when another delivery holds it.

    The fixed steps go in few round trips (bus.store_delivery): the lock, the dispatch
    flag and the first read in one script, the plan's reads with the fence in one
    pipeline, the unlock with the hand-off flag in one more."""
    report = DeliveryReport(session=sid)
    store = bus.store
    # Cleared with the lock taken, before reading: a send after this dispatches afresh.
    start = store.begin_delivery(sid, BATCH)
    if start is None:
        report.busy = True
        return report
    lease = Lease.adopt(store, sid, start.token, start.sent_at)
    report.lease = lease
    finished = False
    try:
        first: DeliveryStart | None = start
        advance_to: str | None = None
        if start.rawflight is not None:
            _recover_raw(bus, sid, report, start.rawflight)
            first = None
        while True:
            if first is not None and first.rows is not None:
                rows, info, answers = first.rows, first.info, first.answers
                first = None
                if not rows:
                    break
                msgs = [json.loads(fields["m"]) for _eid, fields in rows]
            else:
                rows = store.read_after(sid, store.cursor(sid), BATCH)
                if not rows:
                    break
                info = store.get_session(sid)
                msgs = [json.loads(fields["m"]) for _eid, fields in rows]
                answers = store.first_answers(sid, [m["id"] for m in msgs])
            raw = raw_mode(bus, info)
            batch: list[tuple[dict[str, Any], int]] = []
            for (eid, _fields), msg, first_answer in zip(rows, msgs, answers, strict=True):
                if raw and not lease.held():
                    # Past the lease another delivery may have started: stop, not race it.
                    report.busy = True
                    return report
                if (first_answer or {}).get("state") == "withdrawn":
                    report.skipped += 1
                    if raw:
                        store.advance(sid, eid)
                elif raw:
                    _write_raw(bus, sid, eid, msg, report)
                else:
                    # The stream entry's id is the Redis clock when the bus stored it.
                    batch.append((msg, int(eid.split("-")[0])))
            if not raw:
                # Ingest writes only Redis, idempotently: a confirmation within the fresh
                # window (the lock was just taken) is the fence (bus.lease).
                if not lease.held(fresh=True):
                    report.busy = True
                    return report
                bus.inbox.ingest(sid, batch, info, report)
                # Taking a message into the inbox is idempotent, so the cursor moves once
                # per batch; a raw line moves it one by one (it must be written once).
                # The last batch's move goes with the snapshot below, one trip fewer.
                if len(rows) < BATCH:
                    advance_to = rows[-1][0]
                else:
                    store.advance(sid, rows[-1][0])
            if len(rows) < BATCH:
                # The queue's end: a send after the read dispatched a delivery, which
                # hands its work to this one (bus.handoff), so no second, empty read.
                break
        if report.raw or report.inbox:
            bus.metrics.incr("messages_in", report.raw + report.inbox)
        snap = store.delivery_snapshot(sid, lease.token, advance_to=advance_to)
        if not lease.confirmed(snap.held, snap.sent_at):
            report.busy = True
            return report
        bus.inbox.after_delivery(sid, report, snap)
        store.set_trim_floor(sid, bus.settings.stream_keep)
        finished = True
    finally:
        # The hand-off flag goes with the unlock only after a whole run (bus.handoff).
        report.again = lease.release(take_again=finished)
        report.lease = None
    return report


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
    bus: DeliveryHost, sid: str, report: DeliveryReport, flight: dict[str, str]
) -> None:
    """Finish a raw write a killed worker left: skip it if its line is on the floor."""
    if bus.floor.contains_id(sid, flight["id"]):
        log.info(
            "delivery for %s: %s was written before a crash; not writing it again",
            sid,
            flight["id"],
        )
        bus.store.advance(sid, flight["stream_id"])
        report.skipped += 1


__all__ = ["BATCH", "DeliveryHost", "DeliveryReport", "deliver_session", "raw_mode"]
