"""What the facade's parts (:mod:`bus.api.conversing`, :mod:`bus.api.members`,
:mod:`bus.api.host`) rely on :class:`bus.api.facade.Bus` for: the services it builds and
the few calls they share. Declared once here; the facade defines them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bus.core.models import Message, SessionInfo
    from bus.core.settings import Settings
    from bus.delivery.dispatch import Dispatcher
    from bus.delivery.floor import Floor
    from bus.delivery.host import DeliveryParts
    from bus.delivery.inbox import Inbox
    from bus.delivery.receipts import Receipts
    from bus.services.conversation import Conversation
    from bus.services.credentials import Credentials
    from bus.services.door import Door
    from bus.services.items import Items
    from bus.services.routing import Router
    from bus.services.send_many import BatchSender
    from bus.services.send_rate import SendRate
    from bus.services.sessions import Sessions
    from bus.services.signin_links import SigninLinks
    from bus.services.typed_requests import Requests
    from bus.services.watch import Watch
    from bus.store.store import Store
    from bus.telemetry.metrics import Metrics
    from bus.trust.access import Access
    from bus.trust.tokens import Authenticator, Claims


class Parts:
    """The services of one bus and its providers (see :class:`bus.api.facade.Bus`)."""

    settings: Settings
    auth: Authenticator
    floor: Floor
    receipts: Receipts
    inbox: Inbox
    router: Router
    sessions: Sessions
    access: Access
    conversation: Conversation
    credentials: Credentials
    send_rate: SendRate
    delivery: DeliveryParts
    batches: BatchSender
    items: Items
    requests: Requests
    watch: Watch
    links: SigninLinks
    door: Door

    @property
    def store(self) -> Store:
        raise NotImplementedError

    @property
    def dispatcher(self) -> Dispatcher:
        raise NotImplementedError

    @property
    def metrics(self) -> Metrics:
        raise NotImplementedError

    def claims(self, token: str | None, scope: str, *, session: str | None = None) -> Claims | None:
        raise NotImplementedError

    def limit_sender(self, sender: str) -> None:
        raise NotImplementedError

    def session(self, sid: str) -> SessionInfo:
        raise NotImplementedError

    def seen(self, sid: str) -> None:
        raise NotImplementedError

    def post(
        self, msg: Message, *, wait: bool = False, timeout: float | None = None
    ) -> dict[str, Any]:
        raise NotImplementedError
