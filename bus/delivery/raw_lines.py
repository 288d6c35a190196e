"""The one way a message is written raw (its own line on the socket or the floor).

Both callers get the same bookkeeping (a ``delivered`` record, the receipt marked
noticed on a socket's ack, the delivery metrics) and the same at-most-once rule: a line
whose write may already have happened (a crash between the write and its record) is
looked for on the floor before it is written again. The delivery knows that case from
its ``rawflight`` record (:mod:`bus.delivery.engine`); the inbox's closing flush does not know
it, so it always looks (``unsure``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from bus.core.clock import SYSTEM, Clock

if TYPE_CHECKING:
    from bus.store.store import Store
    from bus.telemetry.metrics import Metrics

    from .floor import Floor
    from .receipts import Receipts


class Counts(Protocol):
    """What a write is counted on (a :class:`~bus.delivery.engine.DeliveryReport`)."""

    raw: int
    socket: int
    file: int


class RawLines:
    """Writes raw lines for one store and floor."""

    def __init__(
        self,
        store: Callable[[], Store],
        floor: Floor,
        receipts: Receipts,
        metrics: Callable[[], Metrics],
        clock: Clock = SYSTEM,
    ) -> None:
        self._store, self.floor, self.receipts = store, floor, receipts
        self._metrics, self.clock = metrics, clock

    def write(
        self,
        sid: str,
        msg: dict[str, Any],
        report: Counts,
        *,
        unsure: bool = True,
        before: Callable[[], None] | None = None,
        after: Callable[[], None] | None = None,
    ) -> str | None:
        """Write ``msg`` raw once; the channel (``socket``/``file``), or ``None`` when
        ``unsure`` and its line is already on the floor. ``before`` runs just before the
        write and ``after`` just after it (the delivery's in-flight record and cursor)."""
        if unsure and self.floor.contains_id(sid, msg["id"]):
            return None
        if before is not None:
            before()
        via, _path = self.floor.write_line(sid, msg)
        if after is not None:
            after()
        if via == "socket":
            report.socket += 1
        else:
            report.file += 1
        report.raw += 1
        store, metrics = self._store(), self._metrics()
        store.events.record(sid, "delivered", id=msg["id"], via=via)
        if via == "socket":  # acked by the harness: noticed
            self.receipts.mark(sid, "noticed", [msg["id"]], touch=True)
        metrics.incr("deliveries", via=via)
        now = self.clock.now_ms()
        metrics.observe_latency(max(0, now - int(msg.get("ts") or now)) / 1000)
        return via
