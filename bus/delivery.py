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
    """Deliver everything queued for ``sid``; ``busy`` when another delivery holds it."""
    report = DeliveryReport(session=sid)
    store = bus.store
    lease = Lease.acquire(store, sid)
    if lease is None:
        report.busy = True
        return report
    report.lease = lease
    try:
        # Cleared before reading: a send after this point dispatches a fresh delivery.
        store.clear_pending(sid)
        _recover_raw(bus, sid, report)
        while True:
            rows = store.read_after(sid, store.cursor(sid), BATCH)
            if not rows:
                break
            info = store.get_session(sid)
            raw = raw_mode(bus, info)
            msgs = [json.loads(fields["m"]) for _eid, fields in rows]
            answers = store.first_answers(sid, [m["id"] for m in msgs])
            batch: list[tuple[dict[str, Any], int]] = []
            for (eid, _fields), msg, first in zip(rows, msgs, answers, strict=True):
                if raw and not lease.held():
                    # Past the lease another delivery may have started: stop, not race it.
                    report.busy = True
                    return report
                if (first or {}).get("state") == "withdrawn":
                    report.skipped += 1
                    if raw:
                        store.advance(sid, eid)
                elif raw:
                    _write_raw(bus, sid, eid, msg, report)
                else:
                    # The stream entry's id is the Redis clock when the bus stored it.
                    batch.append((msg, int(eid.split("-")[0])))
            if not raw:
                if not lease.held():
                    report.busy = True
                    return report
                bus.inbox.ingest(sid, batch, info, report)
                # Taking a message into the inbox is idempotent, so the cursor moves once
                # per batch; a raw line moves it one by one (it must be written once).
                store.advance(sid, rows[-1][0])
        if report.raw or report.inbox:
            bus.metrics.incr("messages_in", report.raw + report.inbox)
        if not lease.held():
            report.busy = True
            return report
        bus.inbox.after_delivery(sid, report)
        store.set_trim_floor(sid, bus.settings.stream_keep)
    finally:
        lease.release()
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


def _recover_raw(bus: DeliveryHost, sid: str, report: DeliveryReport) -> None:
    """Finish a raw write a killed worker left: skip it if its line is on the floor."""
    flight = bus.store.rawflight(sid)
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


__all__ = ["BATCH", "DeliveryHost", "DeliveryReport", "deliver_session", "raw_mode"]
