"""The gateway's front door: Host allow-list, JSON-only and same-origin rules,
a body cap and a body read timeout, as one ASGI middleware with per-path-prefix rules.

Refusals use the bus's one shape, ``{"ok": false, "error": code, "message": ...}``, and
nothing behind the door runs. Pages mounted under their own prefix (``/ui/``, with their
own cookie auth and form posts) get their own :class:`Rule` (no JSON-only rule, a larger
body cap for uploads) and share the Host check.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from bus.trust.rules import host_allowed, origin_allowed

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

DEFAULT_MAX_BODY = 64 * 1024
DEFAULT_READ_TIMEOUT_S = 10.0
# A refused body is read and dropped up to this many times the cap before the answer.
DISCARD_FACTOR = 64
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@dataclass(frozen=True)
class Rule:
    """What requests under ``prefix`` must satisfy."""

    prefix: str = "/"
    max_body: int = DEFAULT_MAX_BODY
    # Bodies must be application/json; a missing Content-Type passes only from a
    # non-browser client (no Origin header), as prox's senders send it.
    json_only: bool = True
    # A browser's cross-site request (Origin or Sec-Fetch-Site says so) is refused.
    same_origin: bool = True
    # With authentication on, the bearer token is checked before the body is read: a
    # caller without a valid one never gets its body read, let alone parsed.
    token: bool = False


# What the middleware asks of a token before a body is read: None when it is good, else
# the refusal as (status, code, message).
Authenticate = Callable[[str | None], Awaitable[tuple[int, str, str] | None]]

# Requests served at once, and by one client address; beyond either the answer is 503
# ``busy``, except for these paths (a health check must answer under load). Idle
# connections hold no request slot (HeaderDeadlineH11 bounds them).
MAX_IN_FLIGHT = 64
MAX_IN_FLIGHT_PER_CLIENT = 16
ALWAYS_SERVED = frozenset({"/health"})


def rule_for(path: str, rules: tuple[Rule, ...]) -> Rule:
    """The rule with the longest prefix that ``path`` starts with (a default "/" rule)."""
    best = Rule()
    for rule in rules:
        if path.startswith(rule.prefix) and len(rule.prefix) >= len(best.prefix):
            best = rule
    return best


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers") or []:
        if key.lower() == name:
            return str(value.decode("latin-1"))
    return None


def refusal(scope: Scope, rule: Rule) -> tuple[int, str, str] | None:
    """Why the request's headers are refused, as (status, code, message), or None."""
    host = _header(scope, b"host")
    method = scope.get("method", "GET")
    origin = _header(scope, b"origin")
    if rule.same_origin and method in _BODY_METHODS:
        if not origin_allowed(origin, host):
            return 403, "cross_origin", f"cross-site request from origin {origin!r} refused"
        if (_header(scope, b"sec-fetch-site") or "").lower() == "cross-site":
            return 403, "cross_origin", "cross-site request refused"
    if rule.json_only and method in _BODY_METHODS:
        ctype = _header(scope, b"content-type")
        media = (ctype or "").split(";", 1)[0].strip().lower()
        if ctype is None and origin is None:
            return None
        if media != "application/json":
            return 415, "unsupported_media_type", "the body must be application/json"
    length = _header(scope, b"content-length")
    if length is not None:
        try:
            size = int(length)
        except ValueError:
            return 400, "bad_input", "Content-Length is not a number"
        if size > rule.max_body:
            return 413, "too_large", f"the body is over the {rule.max_body}-byte bound"
    return None


class GuardMiddleware:
    """Checks Host, then the path's :class:`Rule`, then reads the body (bounded in size
    and time) before the app sees it."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        hosts: frozenset[str],
        rules: tuple[Rule, ...] = (),
        read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
        authenticate: Authenticate | None = None,
    ) -> None:
        self.app = app
        self.hosts = hosts
        self.rules = rules
        self.read_timeout_s = read_timeout_s
        self.authenticate = authenticate
        self.in_flight = 0
        self.per_client: dict[str, int] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        client = (scope.get("client") or ("?", 0))[0]
        if scope.get("path") not in ALWAYS_SERVED and (
            self.in_flight >= MAX_IN_FLIGHT
            or self.per_client.get(client, 0) >= MAX_IN_FLIGHT_PER_CLIENT
        ):
            await _answer(send, 503, "busy", "too many requests at once; try again shortly")
            return
        self.in_flight += 1
        self.per_client[client] = self.per_client.get(client, 0) + 1
        try:
            await self._guarded(scope, receive, send)
        finally:
            self.in_flight -= 1
            left = self.per_client[client] - 1
            if left:
                self.per_client[client] = left
            else:
                del self.per_client[client]

    async def _guarded(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not host_allowed(_header(scope, b"host"), self.hosts):
            host = _header(scope, b"host")
            await _answer(
                send, 421, "host_refused", f"Host {host!r} is not one this gateway serves"
            )
            return
        rule = rule_for(scope.get("path", "/"), self.rules)
        why = refusal(scope, rule)
        if why is not None:
            if why[0] == 413:
                await self._discard(receive, rule)
            await _answer(send, *why)
            return
        if scope.get("method", "GET") not in _BODY_METHODS:
            await self.app(scope, receive, send)
            return
        if rule.token and self.authenticate is not None:
            why = await self.authenticate(bearer(scope))
            if why is not None:  # answered without reading a byte of the body
                await _answer(send, *why)
                return
        chunks: list[bytes] = []
        size = 0
        more = True
        try:
            while more:
                msg = await asyncio.wait_for(receive(), self.read_timeout_s)
                if msg["type"] == "http.disconnect":
                    return
                chunk = msg.get("body", b"")
                size += len(chunk)
                if size > rule.max_body:
                    if more and msg.get("more_body"):
                        await self._discard(receive, rule)
                    await _answer(
                        send, 413, "too_large", f"the body is over the {rule.max_body}-byte bound"
                    )
                    return
                chunks.append(chunk)
                more = bool(msg.get("more_body"))
        except TimeoutError:
            await _answer(send, 408, "timeout", "the body did not arrive in time")
            return
        body = b"".join(chunks)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _discard(self, receive: Receive, rule: Rule) -> None:
        """Read and drop a refused body (up to a bound), so the client reads the 413
        instead of a reset connection; nothing of it is kept."""
        budget = DISCARD_FACTOR * rule.max_body
        try:
            while budget > 0:
                msg = await asyncio.wait_for(receive(), self.read_timeout_s)
                budget -= len(msg.get("body", b""))
                if msg["type"] != "http.request" or not msg.get("more_body"):
                    return
        except TimeoutError:
            return


def bearer(scope: Scope) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, else None."""
    scheme, _, token = (_header(scope, b"authorization") or "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


async def _answer(send: Send, status: int, code: str, message: str) -> None:
    body = json.dumps({"ok": False, "error": code, "message": message}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


# -- the access log: sign-in tokens never written down --------------------------------------

_TOKEN_QUERY = re.compile(r"((?:^|[?&;])(?:token|access_token)=)[^&;\s\"]*", re.IGNORECASE)


def redact(text: str) -> str:
    """``text`` with the values of ``token=`` query parameters replaced by ``***``."""
    return _TOKEN_QUERY.sub(r"\1***", text) if "token=" in text.lower() else text


class RedactTokens(logging.Filter):
    """A logging filter: every string argument of a record (the access log's path with
    its query) has its ``token=`` values redacted."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        return True


# -- the connection: a request's headers must arrive in time ----------------------------------

HEADER_TIMEOUT_S = 10.0
# Open connections one client address may hold; more are closed as they are accepted.
MAX_CONNECTIONS_PER_CLIENT = 256


class HeaderDeadlineH11(H11Protocol):
    """uvicorn's h11 protocol, plus a deadline on request headers.

    uvicorn times out a keep-alive connection only after a response; a client that
    connects and sends its headers slowly (or never) would hold a connection forever.
    Here a connection whose next request's headers are not complete within
    ``HEADER_TIMEOUT_S`` of its first byte (or of the connection) is closed.
    """

    _deadline: asyncio.TimerHandle | None = None
    _counted: str | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        peer = transport.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        # Per server (uvicorn's server state is one per server): address -> connections.
        counts: dict[str, int] = self.server_state.__dict__.setdefault("per_client", {})
        if counts.get(address, 0) >= MAX_CONNECTIONS_PER_CLIENT:
            transport.close()
            return
        counts[address] = counts.get(address, 0) + 1
        self._counted = address
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is h11.IDLE:
            self._arm()  # a request's headers have begun (or are awaited): bounded
        elif self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def connection_lost(self, exc: Exception | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        if self._counted is not None:
            counts: dict[str, int] = self.server_state.__dict__["per_client"]
            counts[self._counted] -= 1
            if counts[self._counted] <= 0:
                del counts[self._counted]
            self._counted = None
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._deadline is None:
            self._deadline = self.loop.call_later(HEADER_TIMEOUT_S, self._expire)

    def _expire(self) -> None:
        self._deadline = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()
