"""What the gateway reads and answers: request bodies parsed, refusals mapped to HTTP
statuses (one shape), and the answer models its OpenAPI document names."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal

from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from bus.core.errors import (
    Ambiguous,
    BadInput,
    BusError,
    NotDurable,
    NotFound,
    RateLimited,
    Refused,
    StoreRefused,
    Unauthorized,
    Unavailable,
)
from bus.store.redis_errors import StoreError, refused

_STATUS: list[tuple[type[BusError], int]] = [
    (RateLimited, 429),
    (BadInput, 400),
    (Unauthorized, 401),
    (Refused, 403),
    (NotFound, 404),
    (Ambiguous, 409),
    (Unavailable, 503),
    (StoreRefused, 503),
    (NotDurable, 503),
]


class DeliverOk(BaseModel):
    """``POST /send`` answer, as prox's worker gives it."""

    ok: Literal[True] = True
    via: Literal["socket", "file"]
    id: str


class DeliverError(BaseModel):
    """``POST /send`` refusal, in the bus's one shape (as its front door answers /send):
    ``error`` the machine-readable code (``unknown_session``, ``bad_input``, ...) and
    ``message`` one line saying what was wrong; nothing was written."""

    ok: Literal[False] = False
    error: str
    message: str


class BusErrorAnswer(BaseModel):
    """``POST /v1/send`` refusal: ``error`` is the machine-readable code."""

    ok: Literal[False] = False
    error: str
    message: str


class Health(BaseModel):
    ok: bool = True
    redis: bool
    # The host's name and its workers: shown to a caller with a valid token only, when
    # INBOX_SECRET is set.
    host: str | None = None
    # Each host's worker (and the scheduler): heartbeat ages, queue depth; absent when
    # Redis is down.
    workers: list[dict[str, Any]] | None = None


MESSAGE_BODY = {
    "required": True,
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Message"}}},
}


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def deliver_refusal(code: str, message: object, status: int) -> JSONResponse:
    """A ``POST /send`` refusal (:class:`DeliverError`) with ``status``."""
    return JSONResponse(
        DeliverError(error=code, message=one_line(str(message))).model_dump(), status
    )


def status_of(err: BusError) -> int:
    for cls, status in _STATUS:
        if isinstance(err, cls):
            return status
    return 400


def json_body(raw: bytes) -> dict[str, Any]:
    """The body as JSON; a BadInput for anything else (prox senders may omit the header)."""
    try:
        body = json.loads(raw)
    except RecursionError as exc:
        raise BadInput("the body is nested too deeply") from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadInput(f"the body is not JSON: {one_line(str(exc))}") from exc
    if not isinstance(body, dict):
        raise BadInput("a message must be a JSON object")
    return body


MAX_BATCH = 10_000
MAX_BATCH_BYTES = 32 * 1024 * 1024


def batch_body(raw: bytes) -> list[Any]:
    """A batch body: a JSON array of messages, or an object with a ``messages`` array."""
    try:
        body = json.loads(raw)
    except RecursionError as exc:
        raise BadInput("the body is nested too deeply") from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadInput(f"the body is not JSON: {one_line(str(exc))}") from exc
    if isinstance(body, dict):
        body = body.get("messages")
    if not isinstance(body, list):
        raise BadInput('a batch must be a JSON array of messages (or {"messages": [...]})')
    if len(body) > MAX_BATCH:
        raise BadInput(f"a batch holds at most {MAX_BATCH} messages, not {len(body)}")
    return body


async def answer(call: Callable[[], Any]) -> JSONResponse:
    """One library call off the event loop, answered as JSON: a refusal with its status,
    a body no check foresaw as a 400 (the caller's input, never a 500), Redis down 503."""
    try:
        return JSONResponse(await run_in_threadpool(call))
    except BusError as err:
        return JSONResponse(err.to_json(), status_of(err))
    except (ValueError, TypeError, RecursionError) as err:
        bad = BadInput(one_line(f"malformed message: {err}"))
        return JSONResponse(bad.to_json(), 400)
    except StoreError as err:
        said = refused(err)
        if said is not None:
            return JSONResponse(said.to_json(), 503)
        unavailable = Unavailable(one_line(f"Redis did not answer: {err}"))
        return JSONResponse(unavailable.to_json(), 503)
