"""What a host's delivery and the scheduled work are given: :class:`DeliveryParts`.

The facade (:class:`bus.api.facade.Bus`) builds one with the services delivery uses and
hands it to the engine, the kick loops, the scheduler and the heartbeats, so none of
them receives the facade. It satisfies :class:`DeliveryHost`,
:class:`bus.delivery.scheduler.Scheduled` and :class:`bus.telemetry.liveness.HasStore`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from bus.core.clock import Clock
    from bus.core.settings import Settings
    from bus.store.store import Store
    from bus.telemetry.metrics import Metrics

    from .dispatch import Dispatcher
    from .floor import Floor
    from .inbox import Inbox
    from .notice import Notices
    from .raw_lines import RawLines
    from .receipts import Receipts


class DeliveryHost(Protocol):
    """What a host's delivery is given: the settings, the floor, the inbox with its
    notices, raw lines and clock, and the store, metrics and dispatcher."""

    settings: Settings
    floor: Floor
    inbox: Inbox
    notices: Notices
    raw: RawLines
    clock: Clock

    @property
    def store(self) -> Store: ...

    @property
    def metrics(self) -> Metrics: ...

    @property
    def dispatcher(self) -> Dispatcher: ...


class DeliveryParts:
    """The settings, floor, inbox and receipts, and the store, metrics and dispatcher as
    providers (called on use: a process that never delivers never connects)."""

    def __init__(
        self,
        settings: Settings,
        floor: Floor,
        inbox: Inbox,
        receipts: Receipts,
        *,
        store: Callable[[], Store],
        metrics: Callable[[], Metrics],
        dispatcher: Callable[[], Dispatcher],
    ) -> None:
        self.settings, self.floor, self.inbox, self.receipts = settings, floor, inbox, receipts
        # The inbox's own, handed to the engine's stages as they are.
        self.notices, self.raw, self.clock = inbox.notices, inbox.raw, inbox.clock
        self._store, self._metrics, self._dispatcher = store, metrics, dispatcher

    @property
    def store(self) -> Store:
        return self._store()

    @property
    def metrics(self) -> Metrics:
        return self._metrics()

    @property
    def dispatcher(self) -> Dispatcher:
        return self._dispatcher()


__all__ = ["DeliveryHost", "DeliveryParts"]
