"""What the edge modules need of the bus, each as a narrow interface.

:class:`bus.api.Bus` satisfies every one; a module that takes one of these names the few
things it uses instead of importing the facade, so no module below the facade imports it
(no import circle), and a test may hand in anything with those parts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from bus.telemetry.liveness import HasStore

if TYPE_CHECKING:
    from bus.core.models import Message, SessionInfo
    from bus.core.settings import Settings


class Streams(HasStore, Protocol):
    """The store and a client that may block (``watch``)."""

    @property
    def blocking(self) -> Any: ...


class Poster(HasStore, Protocol):
    """Typed requests and items: the store, session lookup, and posting settled messages."""

    settings: Settings

    def session(self, sid: str) -> SessionInfo: ...

    def post(
        self, msg: Message, *, wait: bool = False, timeout: float | None = None
    ) -> dict[str, Any]: ...


class Issuer(HasStore, Protocol):
    """The web inbox's sign-in links: settings, member lookup and token issuing."""

    settings: Settings

    def issue_token(
        self,
        *,
        session: str | None = None,
        member: str | None = None,
        scopes: Any,
        ttl_s: int | None = None,
        operator: str | None = None,
    ) -> dict[str, Any]: ...
