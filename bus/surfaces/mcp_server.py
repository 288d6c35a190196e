"""``inbox mcp``: the bus as MCP tools over stdio (official ``mcp`` SDK, 2.x ``MCPServer``).

Tools: ``send``, ``inbox``, ``threads``, ``read``, ``reply``, ``watch``,
``withdraw``, ``receipt``, ``sent``, and, when the bus has them, ``decide``, ``read_inbox``, ``reply_inbox``.
Each returns the same JSON the CLI prints, as ``structuredContent`` and as one JSON text
block. A refusal (:class:`bus.core.errors.BusError`) is a tool error (``isError``) whose text
is ``<code>: <message>`` and whose structured content is the error's JSON; nothing is
sent or written on a refusal.

The caller is the session in ``INBOX_SESSION`` when it is set, else the session that the
inbox hooks of the harness which started this server recorded at its SessionStart
(bus.surfaces.harness.link: Claude Code and Codex pass an MCP server no session id), never
guessed; with authentication on, the token's subject. :func:`caller` is the one place that
decides it, at each call (a ``/clear`` starts a new session in the same harness).
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, ContentBlock, TextContent
from pydantic import Field

from bus.api import Bus
from bus.core.errors import BadInput, BusError, Unauthorized, Unavailable
from bus.core.models import check_session_id
from bus.store.redis_errors import StoreError, refused
from bus.trust import tokens

from .harness import link as harness_link

NO_SESSION = "no_session"
# A waited send with no timeout would hold a worker thread forever if the client goes away.
DEFAULT_WAIT_S = 300.0


def caller(bus: Bus) -> str:
    """The calling session's id: the token's subject when authentication is on (a token
    for a member cannot act as a session), else ``INBOX_SESSION``; never guessed."""
    if bus.auth.enabled and bus.settings.token:
        claims = tokens.verify(
            bus.settings.secret or "", bus.settings.token, is_revoked=bus.is_revoked
        )
        if claims.sub_kind != "session":
            raise Unauthorized(
                f"the token is {claims.actor}'s, not a session's", code="token_subject"
            )
        if bus.settings.session not in (None, claims.sub):
            raise Unauthorized(
                f"INBOX_SESSION is {bus.settings.session!r} but the token is {claims.actor}'s",
                code="token_subject",
            )
        return claims.sub
    sid = bus.settings.session
    if sid:
        return check_session_id(sid)
    # Claude Code and Codex tell their MCP servers nothing of the session: their
    # SessionStart hook recorded it for the harness process that started this server.
    sid = harness_link.recorded(bus.settings.home)
    if not sid:
        raise BadInput(
            "no caller session: install the inbox hooks in the harness that starts this "
            "MCP server (inbox hooks claude|codex --install), or set INBOX_SESSION in its "
            "environment",
            code=NO_SESSION,
        )
    return sid


def _caller_or_none(bus: Bus) -> str | None:
    try:
        return caller(bus)
    except BusError as exc:
        if exc.code == NO_SESSION:
            return None
        raise


def sender_handle(bus: Bus, sid: str | None) -> str:
    """The caller's own ``host:name``, else the anonymous ``<host>:inbox``."""
    if sid:
        info = bus.store.sessions.get_session(sid)
        if info is not None:
            return info.handle
    return f"{bus.settings.host}:inbox"


def _result(data: Any, *, text: str | None = None, error: bool = False) -> CallToolResult:
    body = data if isinstance(data, dict) else {"ok": True, "result": data}
    blocks: list[ContentBlock] = [TextContent(type="text", text=text)] if text else []
    blocks.append(TextContent(type="text", text=json.dumps(data, ensure_ascii=False)))
    return CallToolResult(content=blocks, structured_content=body, is_error=error)


def _refusal(exc: BusError) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=f"{exc.code}: {exc}")],
        structured_content=exc.to_json(),
        is_error=True,
    )


def _call(fn: Callable[[], Any]) -> CallToolResult:
    """Run one bus call; refusals and an unreachable Redis become tool errors."""
    try:
        out = fn()
    except BusError as exc:
        return _refusal(exc)
    except StoreError as exc:
        said = refused(exc)
        if said is not None:
            return _refusal(said)
        return _refusal(Unavailable(f"Redis did not answer ({exc}); is `inbox up` running?"))
    except ValueError as exc:
        return _refusal(BadInput(str(exc)))
    if isinstance(out, CallToolResult):
        return out
    # An answer that says ok: false (a bounced send, a refused decision) is an error too.
    return _result(out, error=isinstance(out, dict) and out.get("ok") is False)


def _send(
    bus: Bus,
    text: str,
    handle: str | None = None,
    to_id: str | None = None,
    klass: Annotated[
        str | None, Field(alias="class", description="blocker|action|fyi|report")
    ] = None,
    urgency: Annotated[str | None, Field(description="queue|urgent")] = None,
    pr: int | None = None,
    topic: str | None = None,
    thread: str | None = None,
    wait: bool = False,
    timeout: Annotated[
        float | None, Field(description="seconds to wait with wait=true (default 300)")
    ] = None,
    durability: Annotated[
        str | None,
        Field(description="memory|disk|replica: kept how before it is acknowledged"),
    ] = None,
) -> dict[str, Any]:
    if (handle is None) == (to_id is None):
        raise BadInput("send needs exactly one of handle (host:name) or to_id (a session id)")
    me = _caller_or_none(bus)
    fields: dict[str, Any] = {"from": sender_handle(bus, me), "text": text}
    if handle is not None:
        # Resolve first: an unknown or ambiguous handle refuses before anything is stored.
        fields["to"] = handle
        fields["to_id"] = bus.resolve(handle).session
    else:
        fields["to_id"] = to_id
    if me:
        fields["from_session"] = me
    for name, value in (
        ("class", klass),
        ("urgency", urgency),
        ("pr", pr),
        ("topic", topic),
        ("thread", thread),
    ):
        if value is not None:
            fields[name] = value
    if wait and timeout is None:
        timeout = DEFAULT_WAIT_S
    return bus.send(fields, wait=wait, timeout=timeout, durability=durability)


def _send_tool(bus: Bus) -> Callable[..., CallToolResult]:
    """``send`` with a parameter named ``class`` (a Python keyword, hence the wrapper)."""

    def send(**kw: Any) -> CallToolResult:
        if "class" in kw:
            kw["klass"] = kw.pop("class")
        return _call(lambda: _send(bus, **kw))

    sig = inspect.signature(_send, eval_str=True)
    params = [p for name, p in sig.parameters.items() if name != "bus"]
    # The SDK builds the input schema from this signature: ``klass`` is published as "class".
    send.__signature__ = sig.replace(  # type: ignore[attr-defined]
        parameters=params, return_annotation=CallToolResult
    )
    send.__doc__ = (
        "Send a message to another session, by handle (host:name; a handle that names no "
        "session, or several, is an error listing them, and nothing is sent) or by to_id "
        "(its session id). "
        "Answers {ok, id, thread, state, recipient}; with wait=true, the turn's answer."
    )
    return send


def build_server(bus: Bus) -> MCPServer:
    """An MCP server whose tools act for the caller session on ``bus``."""
    from bus.core.version import __version__

    server: MCPServer = MCPServer(
        "inbox",
        version=__version__,  # the client's initialize answer names it (serverInfo)
        instructions=(
            "Messages between agent sessions. Agent messages never become turns: read your "
            "threads with `threads`/`read`, answer with `reply`, send with `send`."
        ),
    )
    server.add_tool(_send_tool(bus), name="send")

    @server.tool()
    def inbox(consume: bool = False) -> CallToolResult:
        """Your own floor (the file queue): peek by default, or drain it with consume=true.
        Returns the model-facing stamped text and the JSON lines."""

        def run() -> CallToolResult:
            sid = caller(bus)
            lines = bus.drain(sid) if consume else bus.peek(sid)
            assert isinstance(lines, list)
            text = bus.render(lines) if lines else ""
            body = {"ok": True, "session": sid, "consumed": consume, "text": text, "lines": lines}
            return _result(body, text=text or None)

        return _call(run)

    @server.tool()
    def threads() -> CallToolResult:
        """Your threads, newest first, with unread and new counts."""
        return _call(lambda: bus.threads(caller(bus)))

    @server.tool()
    def read(thread: str, mark_read: bool = False) -> CallToolResult:
        """One of your threads, oldest first; mark_read=true marks its messages read."""
        return _call(lambda: bus.read(caller(bus), thread, mark_read=mark_read))

    @server.tool()
    def reply(thread: str, text: str) -> CallToolResult:
        """Answer into the other parties' inboxes under the thread (never a turn for them)."""
        return _call(lambda: bus.reply(caller(bus), thread, text))

    @server.tool()
    def withdraw(message_id: str) -> CallToolResult:
        """Unsend (before any notice carried it) or retract (after) a message you sent."""
        return _call(lambda: bus.withdraw(message_id, caller(bus)))

    @server.tool()
    def receipt(
        message_id: str,
        wait_for: Annotated[
            str | None, Field(description="noticed|read|answered: wait until then")
        ] = None,
        timeout: Annotated[
            float | None, Field(description="seconds to wait with wait_for (default 300)")
        ] = None,
    ) -> CallToolResult:
        """What became of a message you sent: {id, to, thread, state, at, recipient}; state
        is stored, noticed, read, answered, or withdrawn/retracted/bounced/expired."""
        if wait_for is not None and timeout is None:
            timeout = DEFAULT_WAIT_S
        return _call(
            lambda: bus.receipt(message_id, by=caller(bus), wait_for=wait_for, timeout=timeout)
        )

    @server.tool()
    def sent(state: str | None = None, limit: int = 50) -> CallToolResult:
        """Your outbox: the messages you sent, newest first, each with its receipt."""
        return _call(lambda: bus.sent(caller(bus), state=state, limit=limit))

    @server.tool()
    def watch(
        name: Annotated[str, Field(description="your subscription's name (yours alone)")] = "lanes",
        sessions: Annotated[
            list[str] | None, Field(description="sessions to follow: you or your lanes")
        ] = None,
        lanes: Annotated[
            bool, Field(description="follow your lanes (sessions you started or gave work)")
        ] = True,
        ack: Annotated[
            dict[str, str] | None,
            Field(description="the `ack` of your previous call: those events are taken"),
        ] = None,
        wait_s: Annotated[float, Field(description="seconds to wait for a first event")] = 10.0,
        max_events: int = 100,
        reset: Annotated[bool, Field(description="start the subscription again from now")] = False,
    ) -> CallToolResult:
        """A durable subscription to your lanes' (and your own) messages: each call returns
        what came since the events you acknowledged (pass back `ack`), nothing missed and
        nothing repeated across restarts; `cursor_expired` if it fell out of retention."""
        from bus.services import durable_watch

        def run() -> dict[str, Any]:
            sub = bus.watch.reader_subscription(
                caller(bus), name, sessions=sessions, lanes=lanes, reset=reset
            )
            if ack:
                sub.commit(ack)
            wait_ms = int(max(0.0, min(wait_s, DEFAULT_WAIT_S)) * 1000)
            events, cursors = durable_watch.poll(
                sub, max_events=max(1, min(max_events, 1000)), wait_ms=wait_ms
            )
            return {"ok": True, "subscription": name, "events": events, "ack": cursors}

        return _call(run)

    _optional_tools(server, bus)
    return server


def _optional_tools(server: MCPServer, bus: Bus) -> None:
    """Typed-thread decisions and member items, when this bus has them."""
    if hasattr(bus, "decide"):

        @server.tool()
        def decide(
            thread_id: str,
            decision: Annotated[str, Field(description="accept|decline|counter|clarify|withdraw")],
            message: str | None = None,
            proposed_windows: Annotated[
                list[dict[str, str]] | None,
                Field(description="for counter: [{start, end, tz_hint?}], ISO-8601"),
            ] = None,
        ) -> CallToolResult:
            """Act on a typed request thread; you are the actor. Answers {ok, envelope_id,
            new_state} or an error code (not_a_party, thread_terminal, invalid_for_state)."""
            return _call(
                lambda: bus.decide(
                    thread_id,
                    decision,
                    actor=caller(bus),
                    message=message,
                    windows=proposed_windows,
                )
            )

    if hasattr(bus, "read_inbox"):

        @server.tool()
        def read_inbox() -> CallToolResult:
            """Every item you posted to your workspace's members, with its thread."""
            return _call(lambda: bus.read_inbox(caller(bus)))

    if hasattr(bus, "reply_inbox"):

        @server.tool()
        def reply_inbox(
            key: str,
            text: str | None = None,
            images: Annotated[
                list[dict[str, str]] | None,
                Field(description="up to 4 pictures: [{path}] inside your sandbox root"),
            ] = None,
        ) -> CallToolResult:
            """Write on one of your items: words, pictures or both (a refusal writes nothing)."""
            root = Path(os.environ.get("INBOX_SANDBOX_ROOT") or os.getcwd())

            def run() -> Any:
                paths = []
                for n, image in enumerate(images or [], 1):
                    if not isinstance(image.get("path"), str):
                        raise BadInput(f"image {n} needs a path")
                    paths.append(image["path"])
                return bus.reply_inbox(caller(bus), key, text=text, image_paths=paths, root=root)

            return _call(run)


def run_stdio(bus: Bus) -> None:
    """Serve ``bus`` over stdio until the client closes the pipe."""
    build_server(bus).run("stdio")
