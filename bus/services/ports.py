"""What the batched ingest (:mod:`bus.services.send_many`) needs of the bus, as a narrow
interface.

:class:`bus.api.Bus` satisfies it; the module names the few things it uses instead of
importing the facade, so no module below the facade imports it (no import circle), and a
test may hand in anything with those parts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from bus.telemetry.liveness import HasStore

if TYPE_CHECKING:
    from bus.core.models import SessionInfo
    from bus.core.settings import Settings
    from bus.delivery.dispatch import Dispatcher
    from bus.delivery.receipts import Receipts
    from bus.trust.tokens import Authenticator, Claims


class Sender(HasStore, Protocol):
    """The batched ingest: what ``send`` checks and routes with."""

    settings: Settings
    auth: Authenticator
    receipts: Receipts

    @property
    def dispatcher(self) -> Dispatcher: ...

    def claims(
        self, token: str | None, scope: str, *, session: str | None = None
    ) -> Claims | None: ...

    def settle_sender(self, data: dict[str, Any], claims: Claims | None) -> dict[str, Any]: ...

    def resolve(self, handle: str) -> SessionInfo: ...

    def floor_listening(self, info: SessionInfo) -> bool: ...
