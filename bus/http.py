"""The HTTP gateway (``inbox serve``): prox-compatible ``POST /send`` and the bus's own routes.

| route | what |
|---|---|
| ``POST /send`` | prox's remote delivery: the local precedence (socket, else file) on this host, no Redis |
| ``POST /v1/send`` | the bus proper: store in Redis and route to the owning host (SPEC section 4) |
| ``GET /health`` | ``{"ok": true, "redis": bool, "host"}``; 200 even when Redis is down |
| ``GET /metrics`` | Prometheus text: the shared counters plus this process's HTTP requests |
| ``GET /openapi.json`` | FastAPI's OpenAPI document, with the wire ``Message`` schema |

Binds to loopback unless told otherwise (SPEC section 9): prox's ``/send`` is
unauthenticated and ``from`` is self-reported.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import redis
import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from . import liveness
from .api import Bus
from .errors import Ambiguous, BadInput, BusError, NotFound, Refused, Unauthorized, Unavailable
from .metrics import RedisCollector
from .models import Message, SendAnswer, parse_message


def _bearer(request: Request) -> str | None:
    """The caller's token from ``Authorization: Bearer <token>`` (else INBOX_TOKEN applies)."""
    value = request.headers.get("authorization", "")
    scheme, _, token = value.partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 5252

_STATUS: list[tuple[type[BusError], int]] = [
    (BadInput, 400),
    (Unauthorized, 401),
    (Refused, 403),
    (NotFound, 404),
    (Ambiguous, 409),
    (Unavailable, 503),
]


class DeliverOk(BaseModel):
    """``POST /send`` answer, as prox's worker gives it."""

    ok: Literal[True] = True
    via: Literal["socket", "file"]
    id: str


class DeliverError(BaseModel):
    """``POST /send`` refusal: one line saying what was wrong; nothing was written."""

    ok: Literal[False] = False
    error: str


class BusErrorAnswer(BaseModel):
    """``POST /v1/send`` refusal: ``error`` is the machine-readable code."""

    ok: Literal[False] = False
    error: str
    message: str


class Health(BaseModel):
    ok: bool = True
    redis: bool
    host: str
    # Each host's worker (and the scheduler): heartbeat ages, queue depth; absent when
    # Redis is down.
    workers: list[dict[str, Any]] | None = None


_MESSAGE_BODY = {
    "required": True,
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Message"}}},
}


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _status_of(err: BusError) -> int:
    for cls, status in _STATUS:
        if isinstance(err, cls):
            return status
    return 400


def _json_body(raw: bytes) -> dict[str, Any]:
    """The body as JSON; a BadInput for anything else (prox senders may omit the header)."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadInput(f"the body is not JSON: {_one_line(str(exc))}") from exc
    if not isinstance(body, dict):
        raise BadInput("a message must be a JSON object")
    return body


def create_app(bus: Bus) -> FastAPI:
    """The gateway's FastAPI app for ``bus``; every handler makes one call into it."""
    app = FastAPI(
        title="inbox gateway",
        version="1",
        description=__doc__,
        openapi_url="/openapi.json",
        docs_url=None,
        redoc_url=None,
    )
    registry = CollectorRegistry()
    registry.register(RedisCollector(bus))
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
        responses={s: {"model": DeliverError} for s in (400, 401, 500, 503)},
        openapi_extra={"requestBody": _MESSAGE_BODY},
        summary="Deliver on this host (prox's remote delivery)",
    )
    async def send_local(request: Request) -> JSONResponse:
        """Run the local precedence: the session's socket if a listener acks, else the file."""
        raw = await request.body()
        try:
            data = _json_body(raw)
            if bus.auth.enabled:
                # With a secret, prox's door is authenticated too; the token names the sender.
                data = await run_in_threadpool(bus.as_sender, data, _bearer(request))
            else:
                data["verified"] = False
            msg = parse_message(data)
            # Parsed before anything is written; a bad to_id never becomes a path.
            via, _path = await run_in_threadpool(bus.floor.deliver, msg.to_id, msg.wire())
        except Unauthorized as err:
            return JSONResponse(DeliverError(error=_one_line(str(err))).model_dump(), 401)
        except BusError as err:
            return JSONResponse(DeliverError(error=_one_line(str(err))).model_dump(), 400)
        except redis.RedisError as err:
            return JSONResponse(
                DeliverError(error=_one_line(f"Redis did not answer: {err}")).model_dump(), 503
            )
        except OSError as err:
            return JSONResponse(
                DeliverError(error=_one_line(f"write failed: {err}")).model_dump(), 500
            )
        return JSONResponse(DeliverOk(via=via, id=msg.id).model_dump())

    @app.post(
        "/v1/send",
        response_model=SendAnswer,
        response_model_exclude_none=True,
        responses={s: {"model": BusErrorAnswer} for s in (400, 401, 404, 409, 503)},
        openapi_extra={"requestBody": _MESSAGE_BODY},
        summary="Send through the bus (Redis, routed to the owning host)",
    )
    async def send_bus(request: Request) -> JSONResponse:
        """Validate, store and route one message; answers SPEC section 4's JSON."""
        raw = await request.body()
        try:
            answer = await run_in_threadpool(
                lambda: bus.send(_json_body(raw), token=_bearer(request))
            )
        except BusError as err:
            return JSONResponse(err.to_json(), _status_of(err))
        except redis.RedisError as err:
            unavailable = Unavailable(_one_line(f"Redis did not answer: {err}"))
            return JSONResponse(unavailable.to_json(), 503)
        return JSONResponse(answer)

    @app.get("/health", response_model=Health, response_model_exclude_none=True)
    async def health() -> Health:
        """Always 200: ``redis`` says whether the store answered (``/send`` works either way)."""

        def ping() -> tuple[bool, list[dict[str, Any]] | None]:
            try:
                bus.store.ping()
                return True, liveness.workers(bus.store)
            except (BusError, redis.RedisError, OSError):
                return False, None

        up, workers = await run_in_threadpool(ping)
        return Health(redis=up, host=bus.settings.host, workers=workers)

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
    return app


def serve(bus: Bus, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> None:
    """Run the gateway with uvicorn until interrupted (loopback unless ``host`` says otherwise)."""
    uvicorn.run(create_app(bus), host=host, port=port, log_level="info")


__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "create_app", "serve"]
