"""The HTTP gateway (``inbox serve``): prox-compatible ``POST /send`` and the bus's own routes.

| route | what |
|---|---|
| ``POST /send`` | prox's remote delivery: the local precedence (socket, else file) on this host, no Redis |
| ``POST /v1/send`` | the bus proper: store in Redis and route to the owning host |
| ``GET /v1/messages/{id}`` | the sender's receipt of one message (its token, or ``?by=SID`` without a secret) |
| ``POST /v1/send/batch`` | a batch of messages through ``Bus.send_many``: refused whole or stored whole |
| ``GET /v1/watch`` | server-sent events: the reader's durable subscription to its lanes (bus.services.durable_watch; its token, or ``?by=SID`` without a secret) |
| ``GET /health`` | ``{"ok": true, "redis": bool, "host"}``; 200 even when Redis is down |
| ``GET /metrics`` | Prometheus text: the shared counters plus this process's HTTP requests |
| ``GET /openapi.json`` | FastAPI's OpenAPI document, with the wire ``Message`` schema |

Binds to loopback unless told otherwise: prox's ``/send`` is
unauthenticated and ``from`` is self-reported.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any

import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from starlette.concurrency import run_in_threadpool

from bus.api import Bus
from bus.core.errors import (
    BadInput,
    BusError,
    Unauthorized,
    Unavailable,
)
from bus.core.models import Message, Receipt, SendAnswer
from bus.store.redis_errors import StoreError, refused
from bus.surfaces.web.app import mount_ui
from bus.surfaces.web.page_gate import MAX_FORM_BYTES
from bus.telemetry import liveness
from bus.telemetry.metrics import RedisCollector
from bus.trust.rules import allowed_hosts, is_loopback

from .front_door import (
    DEFAULT_READ_TIMEOUT_S,
    GuardMiddleware,
    HeaderDeadlineH11,
    RedactTokens,
    Rule,
)
from .wire import (
    MAX_BATCH_BYTES,
    MESSAGE_BODY,
    BusErrorAnswer,
    DeliverError,
    DeliverOk,
    Health,
    answer,
    batch_body,
    deliver_refusal,
    json_body,
    one_line,
    status_of,
)


def _bearer(request: Request) -> str | None:
    """The caller's token from ``Authorization: Bearer <token>``; the gateway never lends
    its own ``INBOX_TOKEN`` (see :func:`create_app`)."""
    value = request.headers.get("authorization", "")
    scheme, _, token = value.partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 5252

# The gateway's own bounds: a stalled keep-alive connection is closed after this many
# seconds, and uvicorn holds at most this many connections and tasks (503 beyond). Requests
# in flight have their own, smaller bounds, overall and per client address, that idle
# connections do not count against (bus.surfaces.http.front_door.MAX_IN_FLIGHT).
KEEPALIVE_TIMEOUT_S = 5
MAX_CONCURRENCY = 1024


async def _sse(sub: Any, stop: threading.Event) -> AsyncIterator[bytes]:
    """A durable subscription as server-sent events, read a second at a time (so a
    closed connection ends it within one); each read's cursors move once its events were
    handed to the connection, a comment line every :data:`SSE_KEEPALIVE_S` when quiet."""
    from bus.services.durable_watch import poll

    quiet_since = time.monotonic()
    try:
        yield b": subscribed\n\n"
        while not stop.is_set():
            events, cursors = await run_in_threadpool(
                lambda: poll(sub, max_events=SSE_BATCH, wait_ms=1000)
            )
            for event in events:
                data = json.dumps(event, ensure_ascii=False)
                head = f"id: {event['session']}/{event['stream_id']}\nevent: message\n"
                yield f"{head}data: {data}\n\n".encode()
            if cursors:
                await run_in_threadpool(sub.commit, cursors)
            # Timed, not counted: a read that returns early (records that are not
            # messages) must not bring the comment sooner.
            now = time.monotonic()
            if events:
                quiet_since = now
            elif now - quiet_since >= SSE_KEEPALIVE_S:
                quiet_since = now
                yield b": quiet\n\n"
    finally:
        stop.set()


SSE_BATCH = 100
SSE_KEEPALIVE_S = 15.0


def create_app(
    bus: Bus,
    *,
    bind: str = DEFAULT_HOST,
    hosts: tuple[str, ...] | None = None,
    rules: tuple[Rule, ...] = (),
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
) -> FastAPI:
    """The gateway's FastAPI app for ``bus``; every handler makes one call into it.

    ``hosts`` are the ``Host`` names it answers (default ``INBOX_ALLOWED_HOSTS``, else the
    loopback names and ``bind``); ``rules`` add per-prefix body rules (``/ui/`` pages).
    """
    if bus.settings.token:
        # Never act with the gateway's own token: a request without one is unauthenticated.
        bus = bus.with_settings(replace(bus.settings, token=None))
    app = FastAPI(
        title="inbox gateway",
        version="1",
        description=__doc__,
        openapi_url="/openapi.json",
        docs_url=None,
        redoc_url=None,
    )
    configured = bus.settings.allowed_hosts if hosts is None else hosts
    # The web inbox posts forms (pictures included) and checks CSRF and origin itself,
    # answering with its own page; the Host check still applies.
    rules = (
        Rule("/ui/", max_body=MAX_FORM_BYTES, json_only=False, same_origin=False),
        # A batch holds up to MAX_BATCH messages of 8,000 characters: a larger bound.
        Rule("/v1/send/batch", max_body=MAX_BATCH_BYTES, token=True),
        Rule("/v1/send", token=True),
        Rule("/send", token=True),
        *rules,
    )

    async def authenticate(token: str | None) -> tuple[int, str, str] | None:
        """The bearer token's refusal, checked before a body is read (secret set only)."""
        if not token:
            return (
                401,
                "token_missing",
                "a token is required for this write: send it as `Authorization: Bearer "
                "<token>` (issue one with `inbox token issue --session SID`)",
            )
        try:
            await run_in_threadpool(bus.auth.verify, token)
        except Unauthorized as err:
            return 401, err.code, one_line(str(err))
        except (Unavailable, StoreError) as err:
            return 503, "unavailable", one_line(f"Redis did not answer: {err}")
        return None

    app.add_middleware(
        GuardMiddleware,
        hosts=allowed_hosts(bind, configured),
        rules=rules,
        read_timeout_s=read_timeout_s,
        authenticate=authenticate if bus.auth.enabled else None,
    )
    registry = CollectorRegistry()
    registry.register(RedisCollector(lambda: bus.store, bus.settings.host_down_s))
    requests = Counter(
        "inbox_http_requests",
        "HTTP requests this gateway process answered",
        ["route", "status"],
        registry=registry,
    )

    @app.middleware("http")
    async def count_requests(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        response = await call_next(request)
        # The route template, not the raw path, so a scan of odd URLs cannot blow up labels.
        route = getattr(request.scope.get("route"), "path", None) or "unmatched"
        requests.labels(route=route, status=str(response.status_code)).inc()
        return response

    @app.post(
        "/send",
        response_model=DeliverOk,
        responses={s: {"model": DeliverError} for s in (400, 401, 403, 404, 429, 500, 503)},
        openapi_extra={"requestBody": MESSAGE_BODY},
        summary="Deliver on this host (prox's remote delivery)",
    )
    async def send_local(request: Request) -> JSONResponse:
        """Run the local precedence: the session's socket if a listener acks, else the file."""
        raw = await request.body()
        try:
            data = json_body(raw)
            # Parsed and checked before anything is written; a bad to_id never becomes a path.
            via, msg_id = await run_in_threadpool(
                lambda: bus.send_local(data, token=_bearer(request))
            )
        except Unauthorized as err:
            return deliver_refusal(err.code, err, 401)
        except Unavailable as err:  # the token's revocation check found no Redis
            return deliver_refusal(err.code, err, 503)
        except BusError as err:
            return deliver_refusal(
                err.code, err, 400 if isinstance(err, BadInput) else status_of(err)
            )
        except StoreError as err:
            said = refused(err)
            if said is not None:
                return deliver_refusal(said.code, said, 503)
            return deliver_refusal("unavailable", f"Redis did not answer: {err}", 503)
        except OSError as err:
            return deliver_refusal("write_failed", f"write failed: {err}", 500)
        return JSONResponse(DeliverOk(via=via, id=msg_id).model_dump())

    @app.post(
        "/v1/send",
        response_model=SendAnswer,
        response_model_exclude_none=True,
        responses={s: {"model": BusErrorAnswer} for s in (400, 401, 404, 409, 503)},
        openapi_extra={"requestBody": MESSAGE_BODY},
        summary="Send through the bus (Redis, routed to the owning host)",
    )
    async def send_bus(request: Request) -> JSONResponse:
        """Validate, store and route one message; returns the send answer."""
        raw = await request.body()
        return await answer(lambda: bus.send(json_body(raw), token=_bearer(request)))

    @app.get(
        "/v1/messages/{message_id}",
        response_model=Receipt,
        response_model_exclude_none=True,
        responses={s: {"model": BusErrorAnswer} for s in (400, 401, 403, 404, 503)},
        summary="The sender's receipt of one message",
    )
    async def message_receipt(
        message_id: str, request: Request, by: str | None = None
    ) -> JSONResponse:
        """Only the sender reads it: the bearer token's subject when a secret is set (never
        the gateway's own token), else the session named by ``?by=``."""
        token = _bearer(request)
        try:
            if bus.auth.enabled and not token:
                raise Unauthorized(
                    "a bearer token is required: send the sender's as `Authorization: Bearer "
                    "<token>` (issue one with `inbox token issue --session SID`)",
                    code="token_missing",
                )
            if not bus.auth.enabled and not by:
                raise BadInput("name the sender session: ?by=SID", code="no_session")
        except BusError as err:
            return JSONResponse(err.to_json(), status_of(err))
        return await answer(lambda: bus.receipt(message_id, by=by, token=token))

    @app.post(
        "/v1/send/batch",
        responses={s: {"model": BusErrorAnswer} for s in (400, 401, 404, 409, 503)},
        summary="Send a batch through the bus (validated whole, one answer per message)",
    )
    async def send_batch(request: Request) -> JSONResponse:
        """A JSON array of messages (or ``{"messages": [...]}``); answers
        ``{"ok": true, "answers": [...]}``, each as ``/v1/send`` would. One bad message
        refuses the batch (400 naming its ``index``) and nothing is written. ``?durability=``
        overrides ``INBOX_DURABILITY`` for the batch (confirmed once per round trip)."""
        raw = await request.body()
        level = request.query_params.get("durability")
        token = _bearer(request)
        return await answer(
            lambda: {
                "ok": True,
                "answers": bus.send_many(batch_body(raw), token=token, durability=level),
            }
        )

    @app.get(
        "/v1/watch",
        responses={
            200: {"content": {"text/event-stream": {}}},
            **{s: {"model": BusErrorAnswer} for s in (400, 401, 403, 404, 409, 503)},
        },
        summary="Server-sent events: your durable subscription to your lanes' messages",
    )
    async def watch_events(
        request: Request,
        name: str = "lanes",
        sessions: str | None = None,
        lanes: bool = True,
        by: str | None = None,
        reset: bool = False,
    ) -> Response:
        """One ``message`` event per message (``id`` ``<session>/<stream id>``, ``data``
        as ``inbox watch`` prints it), resumed after a reconnect by the subscription's
        ``name``; events are acknowledged once handed to the connection (a batch cut off
        by a disconnect comes again, never lost)."""
        stop = threading.Event()
        names = [s for s in (sessions or "").split(",") if s] or None
        try:
            sub = await run_in_threadpool(
                lambda: bus.watch.open_for_reader(
                    _bearer(request),
                    by,
                    name,
                    sessions=names,
                    lanes=lanes,
                    reset=reset,
                    stop=stop,
                )
            )
        except BusError as err:
            return JSONResponse(err.to_json(), status_of(err))
        except StoreError as err:
            return JSONResponse(Unavailable(f"Redis did not answer: {err}").to_json(), 503)
        return StreamingResponse(
            _sse(sub, stop), media_type="text/event-stream", headers={"Cache-Control": "no-store"}
        )

    @app.get("/health", response_model=Health, response_model_exclude_none=True)
    async def health(request: Request) -> Health:
        """Always 200: ``redis`` says whether the store answered (``/send`` works either way).
        With ``INBOX_SECRET`` set, the host's name and the workers (their floors' folders
        and pids) are shown only to a caller with a valid token."""

        def ping() -> tuple[bool, bool, list[dict[str, Any]] | None]:
            shown = _may_see_details(_bearer(request))
            try:
                bus.store.ping()
                return True, shown, (liveness.workers(bus.store) if shown else None)
            except (BusError, StoreError, OSError):
                return False, shown, None

        def _may_see_details(token: str | None) -> bool:
            if not bus.auth.enabled:
                return True
            if not token:
                return False
            try:
                bus.auth.verify(token)
            except (BusError, StoreError):
                return False
            return True

        up, shown, workers = await run_in_threadpool(ping)
        return Health(redis=up, host=bus.settings.host if shown else None, workers=workers)

    @app.get("/metrics", response_class=Response, responses={200: {"content": {"text/plain": {}}}})
    async def metrics() -> Response:
        """Prometheus exposition: shared counters, queue depths, latencies, HTTP requests."""
        body = await run_in_threadpool(generate_latest, registry)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    def openapi() -> dict[str, Any]:
        # The send routes read the raw body (prox senders may send no content type, and a
        # refusal must be prox's one-line 400, not FastAPI's 422), so FastAPI does not see
        # the Message model; add its schema so the documented body resolves.
        if app.openapi_schema is None:
            doc = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            schemas = doc.setdefault("components", {}).setdefault("schemas", {})
            msg = Message.model_json_schema(
                by_alias=True, ref_template="#/components/schemas/{model}"
            )
            schemas.update(msg.pop("$defs", {}))
            schemas["Message"] = msg
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    mount_ui(app, bus)  # the web inbox under /ui/ (bus/web)
    return app


def check_bind(bus: Bus, host: str) -> None:
    """Refuse a non-loopback bind without ``INBOX_SECRET``: anyone who reaches it could
    write as anyone."""
    if not is_loopback(host) and not bus.settings.secret:
        raise BadInput(
            f"refusing to bind {host}: a non-loopback gateway needs INBOX_SECRET set",
            code="insecure_bind",
        )


def log_config() -> dict[str, Any]:
    """uvicorn's logging configuration with sign-in tokens redacted from every line
    (``GET /ui/login?token=...`` is logged as ``token=***``)."""
    config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    config.setdefault("filters", {})["redact_tokens"] = {"()": RedactTokens}
    for name in ("uvicorn.access", "uvicorn.error"):
        config["loggers"].setdefault(name, {})["filters"] = ["redact_tokens"]
    return config


def serve_options(bus: Bus, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> dict[str, Any]:
    """What :func:`serve` runs uvicorn with (besides the app)."""
    del bus
    return {
        "host": host,
        "port": port,
        "log_level": "info",
        "log_config": log_config(),
        "timeout_keep_alive": KEEPALIVE_TIMEOUT_S,
        "limit_concurrency": MAX_CONCURRENCY,
        "h11_max_incomplete_event_size": 16 * 1024,
        "http": HeaderDeadlineH11,  # headers in time; connections bounded per address
    }


def serve(bus: Bus, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> None:
    """Run the gateway with uvicorn until interrupted (loopback unless ``host`` says otherwise)."""
    check_bind(bus, host)
    uvicorn.run(create_app(bus, bind=host), **serve_options(bus, host, port))


__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "check_bind", "create_app", "serve"]
