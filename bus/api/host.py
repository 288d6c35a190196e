"""The facade's host side: a host's delivery, prox's local drop, the floor, the status,
forgetting a host gone for good.

A part of :class:`bus.api.facade.Bus`.
"""

from __future__ import annotations

import contextlib
from typing import Any

from bus.core import faults
from bus.core.models import DeliverAnswer, check_session_id, parse_message
from bus.delivery import engine as delivery_engine
from bus.delivery.engine import DeliveryReport
from bus.store.redis_errors import StoreError, translate_redis_errors
from bus.telemetry import host_retire
from bus.telemetry.status import status_report

from .parts import Parts


@translate_redis_errors
class Host(Parts):
    """Delivery on this host, the floor, ``inbox status``."""

    # -- the host's side ----------------------------------------------------------------

    def deliver_session(self, sid: str) -> DeliveryReport:
        """The worker's job: deliver what is queued for ``sid`` on this host; ``busy`` when
        a delivery already running for it takes the work over (:mod:`bus.delivery.engine`)."""
        check_session_id(sid)
        return delivery_engine.deliver(self.delivery, sid)

    def deliver_local(
        self, sid: str, *, sender: str, text: str, urgency: str = "queue", msg_id: str | None = None
    ) -> dict[str, Any]:
        """prox's ``deliver``: local precedence only, no Redis needed."""
        fields: dict[str, Any] = {
            "from": sender,
            "to_id": sid,
            "text": text,
            "urgency": urgency,
            "verified": False,  # nothing authenticates a local drop
        }
        if msg_id:
            fields["id"] = msg_id
        msg = parse_message(fields)
        via, path = self.floor.write_line(sid, msg.wire())
        return DeliverAnswer(via=via, id=msg.id, path=str(path)).model_dump()

    def peek(self, sid: str, *, stamped: bool = False) -> list[dict[str, Any]] | str:
        lines = self.floor.peek(check_session_id(sid))
        return self.render(lines) if stamped else lines

    def drain(self, sid: str, *, stamped: bool = False) -> list[dict[str, Any]] | str:
        """Claim the floor; notices drained here are marked noticed (now or when Redis is
        back). Lines the floor could not read are skipped and said in one ``malformed``
        line (:meth:`bus.delivery.floor_result.DrainResult.handed`)."""
        result = self.floor.drain(check_session_id(sid))
        faults.point("drain:after_unlink")
        self.inbox.on_drain(sid, result.taken)
        self.floor.handed_on(sid, result.lines)
        with contextlib.suppress(StoreError):
            self.seen(sid)  # the drain works without Redis; presence is best effort
        lines = result.handed(self.floor.malformed_path(sid))
        return self.render(lines) if stamped else lines

    def render(self, lines: list[dict[str, Any]]) -> str:
        return self.inbox.render(lines)

    def status(self) -> dict[str, Any]:
        """Sessions with their backlogs, workers, memory settings (``inbox status``)."""
        return status_report(self.store, self.settings)

    def forget_host(self, host: str) -> dict[str, Any]:
        """``inbox host forget``: remove a ``down`` host's records (its heartbeats, floor
        claim, kick list and Celery queue); refused, nothing written, for an unknown host,
        one ``up`` or ``starting``, or one with sessions still open
        (:mod:`bus.telemetry.host_retire`)."""
        return host_retire.forget_host(self.store, self.settings, host)
