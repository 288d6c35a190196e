"""The facade: :class:`Bus` builds every service once and checks who may act before one call.

Its calls are grouped in parts by concept: sessions and tokens here, sending and threads
(:mod:`bus.api.conversing`), members and items (:mod:`bus.api.members`), the host's side
(:mod:`bus.api.host`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bus.core.clock import SYSTEM, Clock
from bus.core.models import SessionInfo
from bus.core.settings import Settings
from bus.delivery.dispatch import Dispatcher, LazyDispatcher, default_dispatcher
from bus.delivery.floor import Floor
from bus.delivery.floor_result import floor_sync
from bus.delivery.host import DeliveryParts
from bus.delivery.inbox import Inbox
from bus.delivery.kick_list import ListDispatcher
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
from bus.store.connect import open_store
from bus.store.redis_errors import translate_redis_errors
from bus.store.store import Store
from bus.trust.access import Access
from bus.trust.tokens import Authenticator, Claims

from .conversing import Conversing
from .forward import same_as
from .host import Host
from .members import Members

if TYPE_CHECKING:
    from bus.telemetry.metrics import Metrics


@translate_redis_errors
class Bus(Conversing, Members, Host):
    """One connection to the bus: sessions, sends, local delivery and the floor."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        client: Any = None,
        dispatcher: Dispatcher | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.settings = settings or Settings.from_env()
        self.clock = clock or SYSTEM
        self._client = client
        self._store: Store | None = None
        self._dispatcher = dispatcher
        self._metrics: Metrics | None = None
        self._blocking: Any = None
        # The composition root: each service gets what it uses, never the Bus. Store,
        # metrics, blocking client and dispatcher are providers: made on first use, so a
        # drain or a hook that never reaches Redis (or Celery) never connects.
        store, s, clk = (lambda: self.store), self.settings, self.clock
        blocking = lambda: self.blocking  # noqa: E731
        self.credentials = Credentials(store, s)
        self.auth = Authenticator(
            s.secret,
            is_revoked=self.credentials.is_revoked,
            is_current=self.credentials.token_current,
        )
        self.floor = Floor(s.home, clock=clk, fsync=floor_sync(s))
        self.send_rate = SendRate(store, s)
        self.receipts = Receipts(store, s, self.claims)
        self.inbox = Inbox(
            store,
            self.floor,
            s,
            receipts=self.receipts,
            metrics=lambda: self.metrics,
            blocking=blocking,
            clock=clk,
        )
        self.delivery = DeliveryParts(
            s,
            self.floor,
            self.inbox,
            self.receipts,
            store=store,
            metrics=lambda: self.metrics,
            dispatcher=lambda: self.dispatcher,
        )
        self.router = Router(
            store,
            self.floor,
            s,
            receipts=self.receipts,
            inbox=self.inbox,
            dispatcher=lambda: self.dispatcher,
            verified=self.auth.enabled,
            clock=clk,
        )
        self.sessions = Sessions(
            store,
            self.floor,
            s,
            inbox=self.inbox,
            router=self.router,
            opener=lambda sid, token: self._opener(sid, token),
            auth=self.auth.enabled,
            clock=clk,
        )
        self.access = Access(
            self.auth,
            s,
            session=self.sessions.get,
            member_status=lambda ws, name: self.store.members.member_status(ws, name),
            clock=clk,
        )
        self.batches = BatchSender(
            store,
            s,
            receipts=self.receipts,
            dispatcher=lambda: self.dispatcher,
            claims=self.access.claims,
            settle=self.access.settle,
            resolve=self.sessions.resolve,
            floor_listening=self.router.floor_listening,
            verified=self.auth.enabled,
            clock=clk,
        )
        self.conversation = Conversation(
            store,
            self.router,
            self.receipts,
            session=self.sessions.get,
            blocking=blocking,
            clock=clk,
        )
        self.items = Items(store, s, session=self.sessions.get, post=self.router.post)
        self.requests = Requests(store, session=self.sessions.get, post=self.router.post)
        self.watch = Watch(
            store,
            blocking,
            claims=self.claims,
            sub_max=s.sub_max,
            sub_idle_s=s.sub_idle_s,
            host_down_s=s.host_down_s,
        )
        self.links = SigninLinks(
            s.ui_url, is_member=self.items.is_member, issue_token=self.credentials.issue_token
        )
        self.door = Door(
            self.floor,
            s,
            access=self.access,
            session=self.sessions.get,
            limit_sender=self.send_rate.limit,
        )

    def with_settings(self, settings: Settings) -> Bus:
        """A bus with other settings on the same connection (store, dispatcher, clock):
        the services are composed again, since each holds the settings it was given."""
        other = Bus(settings, client=self._client, dispatcher=self._dispatcher, clock=self.clock)
        other._store, other._metrics, other._blocking = self._store, self._metrics, self._blocking
        return other

    @property
    def store(self) -> Store:
        """The Redis store, connected on first use (local delivery never needs it)."""
        if self._store is None:
            self._store = open_store(self.settings, self._client)
        return self._store

    @property
    def dispatcher(self) -> Dispatcher:
        """How deliveries are asked for; the default (Celery) is imported on first use,
        so a drain or a hook that dispatches nothing never pays for it."""
        if self._dispatcher is None:
            # Behind the kick list the default is the fallback, made only when a kick
            # finds no loop alive: a send to a live host never imports Celery.
            listed = self.settings.kick == "list"
            self._dispatcher = (
                LazyDispatcher(default_dispatcher) if listed else default_dispatcher()
            )
        if self.settings.kick == "list" and not isinstance(self._dispatcher, ListDispatcher):
            # The host's kick list first, this dispatcher when no loop of it is alive.
            self._dispatcher = ListDispatcher(lambda: self.store, self._dispatcher)
        return self._dispatcher

    @dispatcher.setter
    def dispatcher(self, value: Dispatcher) -> None:
        self._dispatcher = value

    @property
    def blocking(self) -> Any:
        """The store's server on a client whose read timeout outlasts one block, for BLPOP
        and XREAD BLOCK (longer waits are several blocks; see bus.store.blocking)."""
        if self._blocking is None:
            self._blocking = self.store.blocking_client()
        return self._blocking

    @property
    def metrics(self) -> Metrics:
        """Counters shared by every process through Redis (``/metrics`` reads them)."""
        if self._metrics is None:
            from bus.telemetry.metrics import (
                Metrics,  # prometheus_client: not for a drain or a hook
            )

            self._metrics = Metrics(self.store, flush_s=self.settings.metrics_flush_s or 0.0)
        return self._metrics

    def is_revoked(self, jti: str) -> bool:
        return self.credentials.is_revoked(jti)

    def token_current(self, claims: Claims) -> bool:
        """Whether a member token is of its member's current generation."""
        return self.credentials.token_current(claims)

    @same_as(Credentials.issue_token)
    def issue_token(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return self.credentials.issue_token(*args, **kwargs)

    def revoke_token(self, token: str) -> dict[str, Any]:
        """Revoke a token: every later use is refused (``token_revoked``)."""
        return self.credentials.revoke_token(token)

    # -- sessions ---------------------------------------------------------------------

    @same_as(Sessions.open)
    def open_session(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return self.sessions.open(*args, **kwargs)

    def _opener(self, sid: str, token: str | None) -> tuple[str, str] | None:
        """Who opens ``sid`` by ``token`` (kind, subject), checked; ``None`` for no token."""
        claims = self.access.only_as(sid, token, operator_ok=True, member_ok=True)
        return None if claims is None else (claims.sub_kind, claims.sub)

    def seen(self, sid: str) -> None:
        """The harness of ``sid`` is alive now (``last_seen``, ms): open, turn, drain."""
        self.sessions.seen(sid)

    def session(self, sid: str) -> SessionInfo:
        return self.sessions.get(sid)

    def close_session(self, sid: str, *, token: str | None = None) -> dict[str, Any]:
        """Close a session: later messages are delivered raw; its threads stay readable."""
        self.access.only_as(sid, token)
        return self.sessions.close(sid)

    def turn(
        self,
        sid: str,
        event: str,
        *,
        answer: str | None = None,
        prompt_waiting: bool = False,
        token: str | None = None,
    ) -> dict[str, Any]:
        """Record a turn boundary from the harness (``start`` or ``end``)."""
        self.access.only_as(sid, token)
        return self.sessions.turn(sid, event, answer=answer, prompt_waiting=prompt_waiting)


def connect(
    settings: Settings | None = None,
    *,
    dispatcher: Dispatcher | None = None,
    client: Any = None,
) -> Bus:
    """A :class:`Bus` with settings from the environment (or the ones given)."""
    return Bus(settings, client=client, dispatcher=dispatcher)
