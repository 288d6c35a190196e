"""What one delivery run did (the worker's answer for a session)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .lease import Lease


@dataclass
class DeliveryReport:
    session: str
    busy: bool = False
    raw: int = 0
    socket: int = 0
    file: int = 0
    skipped: int = 0
    inbox: int = 0
    notices: list[dict[str, Any]] = field(default_factory=list)
    lease: Lease | None = field(default=None, repr=False)
    # The hand-off flag, taken with the unlock (bus.delivery.engine); None: not taken yet.
    again: bool | None = field(default=None, repr=False)

    def still_held(self) -> bool:
        """The fence before a notice is written: the delivery still holds its lease (a
        confirmation within the lease's fresh window answers, see bus.delivery.lease)."""
        return self.lease is None or self.lease.held(fresh=True)

    def to_json(self) -> dict[str, Any]:
        out = self.__dict__.copy()
        out.pop("lease", None)
        out.pop("again", None)
        return out
