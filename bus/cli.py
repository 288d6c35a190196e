"""The ``inbox`` command line (SPEC section 12 names every command and option).

Each command parses its input and makes one library call. Machine-facing commands print
one JSON document on stdout and exit 0; a refusal prints one line on stderr and exits
non-zero (2 for bad input).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import typer

from . import connect
from .errors import BadInput, BusError
from .models import check_session_id
from .settings import Settings

app = typer.Typer(
    help="The inbox that multi-agent swarms run on.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Help texts show literal brackets (START/END[/TZ]), not rich markup.
    rich_markup_mode=None,
)
session_app = typer.Typer(help="Register and close sessions.", no_args_is_help=True)
app.add_typer(session_app, name="session")

T = TypeVar("T")


def emit(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def fail(message: str, code: int = 2) -> NoReturn:
    sys.stderr.write(f"inbox: {message}\n")
    raise typer.Exit(code)


def run(fn: Callable[[], T]) -> T:
    """Call the library; a refusal becomes one stderr line and the error's exit code."""
    try:
        return fn()
    except BusError as exc:
        # Scripts read the code from stdout; people read the one line on stderr.
        emit(exc.to_json())
        fail(str(exc), exc.exit_code)
    except ValueError as exc:
        fail(str(exc), 2)
    except ConnectionError as exc:
        fail(f"Redis did not answer ({exc}); is `inbox up` running or INBOX_REDIS_URL set?", 3)
    except OSError as exc:
        fail(str(exc), 1)


def _redis_errors() -> tuple[type[BaseException], ...]:
    import redis

    return (redis.ConnectionError, redis.TimeoutError)


def bus_call(fn: Callable[[], T]) -> T:
    try:
        return run(fn)
    except _redis_errors() as exc:
        fail(f"Redis did not answer ({exc}); is `inbox up` running or INBOX_REDIS_URL set?", 3)


# -- sessions and turns -------------------------------------------------------------------


@session_app.command("open")
def session_open(
    sid: str,
    handle: str | None = typer.Option(None, help="host:name (default <host>:<SID>)"),
    host: str | None = typer.Option(None, help="the host whose worker delivers (INBOX_HOST)"),
    parent: str | None = typer.Option(None, help="the session or person that started it"),
    wake_cmd: str | None = typer.Option(None, help="command run with a wake notice on stdin"),
    workspace: str | None = typer.Option(None, help="workspace of a member-started session"),
    starter: str | None = typer.Option(None, help="the member who started it"),
    agent_inbox: bool | None = typer.Option(
        None, "--agent-inbox/--no-agent-inbox", help="per-session inbox switch"
    ),
) -> None:
    """Register a session."""
    b = connect()
    emit(
        bus_call(
            lambda: b.open_session(
                sid,
                handle=handle,
                host=host,
                parent=parent,
                wake_cmd=wake_cmd,
                workspace=workspace,
                starter=starter,
                agent_inbox=agent_inbox,
            )
        )
    )


@session_app.command("close")
def session_close(sid: str) -> None:
    """Close a session: waiting senders get the closing error; threads stay readable."""
    b = connect()
    emit(bus_call(lambda: b.close_session(sid)))


@app.command()
def turn(
    sid: str,
    event: str = typer.Argument(..., help="start or end"),
    answer: str | None = typer.Option(None, help="the turn's answer (end)"),
    prompt_waiting: bool = typer.Option(False, help="a person's prompt waits behind this turn"),
) -> None:
    """Report a turn boundary: `inbox turn SID start` / `inbox turn SID end --answer T`."""
    if event not in ("start", "end"):
        fail(f"turn event must be start or end, not {event!r}")
    b = connect()
    emit(bus_call(lambda: b.turn(sid, event, answer=answer, prompt_waiting=prompt_waiting)))


# -- sending -------------------------------------------------------------------------------


@app.command()
def send(
    to: str | None = typer.Option(None, "--to", help="recipient handle host:name"),
    to_id: str | None = typer.Option(None, "--to-id", help="recipient session id"),
    sender: str | None = typer.Option(None, "--from", help="sender handle host:name"),
    text: str | None = typer.Option(None, help="message text, 1-8000 characters"),
    klass: str | None = typer.Option(None, "--class", help="blocker|action|fyi|report"),
    urgency: str | None = typer.Option(None, help="queue|urgent"),
    pr: int | None = typer.Option(None, help="PR number (thread key)"),
    topic: str | None = typer.Option(None, help="topic (thread key)"),
    thread: str | None = typer.Option(None, help="thread id thr_..."),
    msg_id: str | None = typer.Option(None, "--id", help="message id (a resend is idempotent)"),
    wait: bool = typer.Option(False, help="block until the turn that carried it answers"),
    timeout: float | None = typer.Option(None, help="seconds to wait with --wait"),
    jsonl: str | None = typer.Option(None, help="FILE or - : one wire-format message a line"),
) -> None:
    """Send a message; prints the answer of SPEC section 4."""
    b = connect()
    if jsonl is not None:
        _send_jsonl(b, jsonl)
        return
    if to is None and to_id is None:
        fail("send needs --to HANDLE or --to-id SID")
    if text is None:
        fail("send needs --text")
    fields: dict[str, Any] = {"text": text}
    if sender is not None:
        fields["from"] = sender
    elif not b.settings.secret:
        # Local single-user use: the anonymous fallback sender, as prox's <host>:prox.
        fields["from"] = f"{b.settings.host}:inbox"
    for name, value in (
        ("to", to),
        ("to_id", to_id),
        ("class", klass),
        ("urgency", urgency),
        ("pr", pr),
        ("topic", topic),
        ("thread", thread),
        ("id", msg_id),
    ):
        if value is not None:
            fields[name] = value
    answer = bus_call(lambda: b.send(fields, wait=wait, timeout=timeout))
    emit(answer)
    if answer.get("state") == "bounced" or answer.get("error"):
        raise typer.Exit(1)


JSONL_READ = 1 << 16  # bytes per read: a batch is what one read brings, a few hundred lines


def _line_chunks(fd: int) -> Iterator[list[str]]:
    """The input's complete lines, in the chunks the reads bring them. Each read returns
    what is there (it waits only when nothing is), so a producer that writes a line and
    waits for its answer gets it, and a file goes in batches."""
    rest = b""
    while data := os.read(fd, JSONL_READ):
        *lines, rest = (rest + data).split(b"\n")
        if lines:
            yield [ln.decode("utf-8", "replace") for ln in lines]
    if rest:
        yield [rest.decode("utf-8", "replace")]


def _send_jsonl(b: Any, source: str) -> None:
    """Stream the input through the batched ingest (:mod:`bus.ingest`). A stream cannot
    be refused whole before it is read, so each bad line is refused on its own, with its
    line number and nothing written for it, and the other lines go in."""
    failed = 0
    first_line = 1
    try:
        fd = sys.stdin.fileno() if source == "-" else os.open(source, os.O_RDONLY)
    except OSError as exc:
        fail(f"cannot read {source}: {exc.strerror}", 2)
    try:
        for chunk in _line_chunks(fd):
            failed += _send_chunk(b, chunk, first_line)
            first_line += len(chunk)
    finally:
        if source != "-":
            os.close(fd)
    if failed:
        raise typer.Exit(1)


def _send_chunk(b: Any, chunk: list[str], first_line: int) -> int:
    """Answer each non-blank line of ``chunk`` in order; the number refused."""
    from .ingest import check_each, store_many

    numbered: list[tuple[int, Any]] = []
    for n, line in enumerate(chunk, first_line):
        if not line.strip():
            continue
        try:
            numbered.append((n, json.loads(line)))
        except json.JSONDecodeError as exc:
            numbered.append((n, BadInput(f"line {n} is not JSON: {exc}")))
    parsed = [item for _n, item in numbered if not isinstance(item, BusError)]
    checked = iter(bus_call(lambda: check_each(b, parsed)))
    results: list[tuple[int, Any]] = [
        (n, item if isinstance(item, BusError) else next(checked)) for n, item in numbered
    ]
    good = [r for _n, r in results if not isinstance(r, BusError)]
    answers = iter(bus_call(lambda: store_many(b, good)))
    failed = 0
    for n, r in results:
        if isinstance(r, BusError):
            failed += 1
            emit({**r.to_json(), "line": n})
        else:
            emit(next(answers))
    return failed


@app.command()
def deliver(
    sid: str,
    sender: str = typer.Option(..., "--from", help="sender handle host:name"),
    text: str = typer.Option(..., help="message text"),
    urgency: str = typer.Option("queue", help="queue|urgent"),
) -> None:
    """Local precedence only (socket, else file), no Redis needed: prox's `deliver`."""
    b = connect()
    emit(run(lambda: b.deliver_local(sid, sender=sender, text=text, urgency=urgency)))


@app.command()
def peek(sid: str, stamped: bool = typer.Option(False, help="model-facing text")) -> None:
    """Read the floor without consuming it."""
    b = connect()
    out = run(lambda: b.peek(sid, stamped=stamped))
    if stamped:
        sys.stdout.write(str(out) + ("\n" if out else ""))
    else:
        emit(out)


@app.command()
def drain(sid: str, stamped: bool = typer.Option(False, help="model-facing text")) -> None:
    """Claim the floor: lines move to log.jsonl; notices drained here are marked noticed."""
    b = connect()
    out = run(lambda: b.drain(sid, stamped=stamped))
    if stamped:
        sys.stdout.write(str(out) + ("\n" if out else ""))
    else:
        emit(out)


@app.command()
def listen(
    sid: str, exec_cmd: str | None = typer.Option(None, "--exec", help="pipe each line to CMD")
) -> None:
    """A reference socket listener on inbox.sock that acks each line."""
    from .listen import run_listener

    b = connect()
    run(lambda: check_session_id(sid))
    run_listener(b.floor, sid, exec_cmd)


@app.command()
def threads(sid: str) -> None:
    """The session's threads, newest first."""
    b = connect()
    emit(bus_call(lambda: b.threads(sid)))


@app.command()
def read(
    sid: str,
    thread: str,
    mark_read: bool = typer.Option(False, "--mark-read", help="mark its messages read"),
) -> None:
    """A whole thread, oldest first (refused for a session that is not a party)."""
    b = connect()
    emit(bus_call(lambda: b.read(sid, thread, mark_read=mark_read)))


@app.command()
def reply(sid: str, thread: str, text: str = typer.Option(..., help="the answer")) -> None:
    """Answer into the other parties' inboxes under THREAD; never a turn for them."""
    b = connect()
    emit(bus_call(lambda: b.reply(sid, thread, text)))


@app.command()
def withdraw(
    message_id: str, by: str = typer.Option(..., "--by", help="the sender session")
) -> None:
    """Unsend a message no notice carried yet, else retract it into its thread."""
    b = connect()
    emit(bus_call(lambda: b.withdraw(message_id, by)))


@app.command()
def status() -> None:
    """Sessions, their states and queue backlogs."""
    b = connect()
    emit(bus_call(b.status))


# -- processes -----------------------------------------------------------------------------


def worker_argv(settings: Settings, concurrency: int, pool: str, loglevel: str) -> list[str]:
    from workers.app import SHARED_QUEUE, host_queue

    return [
        "worker",
        "-Q",
        f"{SHARED_QUEUE},{host_queue(settings.host)}",
        "-n",
        f"{settings.host}@%h",
        "-c",
        str(concurrency),
        "-P",
        pool,
        "-l",
        loglevel,
        "--without-gossip",
        "--without-mingle",
    ]


@app.command()
def worker(
    concurrency: int = typer.Option(2, help="processes"),
    pool: str = typer.Option("prefork", help="prefork|solo|threads"),
    loglevel: str = typer.Option("info"),
) -> None:
    """A Celery worker for this host (INBOX_HOST): `celery -A workers worker` with that env."""
    settings = Settings.from_env()
    run(lambda: check_session_id(settings.host, "host name"))
    from workers.app import app as celery_app

    celery_app.worker_main(worker_argv(settings, concurrency, pool, loglevel))


@app.command()
def scheduler() -> None:
    """The scheduled work (debounced wakes, flushes, retries) for the whole bus."""
    from workers.dispatch import CeleryDispatcher

    from .scheduler import run as run_scheduler

    b = connect(dispatcher=CeleryDispatcher())
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        run_scheduler(b, stop)
    except KeyboardInterrupt:
        pass


@app.command()
def up(
    concurrency: int = typer.Option(2, help="worker processes"),
    redis_port: int = typer.Option(0, help="also listen on this TCP port (0: socket only)"),
) -> None:
    """Run the bus here: embedded Redis (unless INBOX_REDIS_URL), a worker, the scheduler."""
    from .up import run_up

    raise typer.Exit(run_up(Settings.from_env(), concurrency=concurrency, redis_port=redis_port))


@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", help="bind address (loopback unless told otherwise)"),
    port: int = typer.Option(5252, help="port (prox's is 5252)"),
) -> None:
    """The HTTP gateway: prox-compatible POST /send, GET /health, /metrics, /openapi.json."""
    from .http import serve as serve_http

    serve_http(connect(), host=host, port=port)


@app.command()
def watch(
    sid: str | None = typer.Argument(None, help="the session to follow"),
    all_sessions: bool = typer.Option(False, "--all", help="every session, newcomers included"),
    since: str = typer.Option("$", help="$ (only new), 0-0 (all still kept) or a stream id"),
) -> None:
    """Follow messages live: one JSON line per message, until Ctrl-C."""
    from .watch import run_watch

    if all_sessions == (sid is not None):
        fail("watch needs SID or --all (one of them)")
    b = connect()
    sessions = None if sid is None else [run(lambda: check_session_id(sid))]
    bus_call(lambda: run_watch(b, sessions, since=since))


@app.command()
def top(interval: float = typer.Option(1.0, help="seconds between refreshes")) -> None:
    """Sessions live: state, turns, unread, new, backlog and age, until Ctrl-C."""
    from .watch import run_top

    b = connect()
    bus_call(lambda: run_top(b, interval))


@app.command()
def mcp() -> None:
    """The MCP server on stdio (official mcp SDK)."""
    from .mcp_server import run_stdio

    run_stdio(connect())


@app.command()
def flower(
    address: str = typer.Option("127.0.0.1", help="bind address"),
    port: int = typer.Option(5555),
    basic_auth: str | None = typer.Option(
        None, help="user:password (default INBOX_FLOWER_AUTH, else generated and printed)"
    ),
) -> None:
    """Flower for the workers, with authentication, bound to loopback by default."""
    from .flower import run_flower

    raise typer.Exit(
        run_flower(Settings.from_env(), address=address, port=port, basic_auth=basic_auth)
    )


member_app = typer.Typer(help="Members of a workspace.", no_args_is_help=True)
app.add_typer(member_app, name="member")
item_app = typer.Typer(help="Items for members (SPEC section 8).", no_args_is_help=True)
app.add_typer(item_app, name="item")
WINDOW_HELP = "START/END[/TZ] (ISO-8601), repeatable"


def _windows(values: list[str] | None) -> list[dict[str, str]]:
    from .decisions import parse_window

    return [parse_window(v) for v in values or []]


@app.command()
def request(
    to_id: str = typer.Option(..., "--to-id", help="the recipient session"),
    type_: str = typer.Option(..., "--type", help="meeting_request or task"),
    text: str = typer.Option(..., help="the request"),
    window: list[str] | None = typer.Option(None, "--window", help=WINDOW_HELP),
) -> None:
    """Open a typed request thread as INBOX_SESSION; prints {ok, thread, state}."""
    b = connect()
    emit(bus_call(lambda: b.request(to_id, type_, text, windows=_windows(window))))


@app.command()
def decide(
    thread: str,
    decision: str = typer.Argument(..., help="accept|decline|counter|clarify|withdraw"),
    message: str | None = typer.Option(None, help="a note, at most 2000 characters"),
    window: list[str] | None = typer.Option(None, "--window", help=WINDOW_HELP),
) -> None:
    """Act on a typed thread as INBOX_SESSION; prints {ok, envelope_id, new_state}."""
    from .errors import Refused

    b = connect()

    def call() -> dict[str, Any]:
        try:
            return b.decide(thread, decision, message=message, windows=_windows(window))
        except Refused as exc:
            # SPEC section 12: a refusal prints {"ok": false, "error": code, "message"}, exit 1.
            emit(exc.to_json())
            sys.stderr.write(f"inbox: {exc}\n")
            raise typer.Exit(1) from None

    emit(bus_call(call))


@member_app.command("add")
def member_add(workspace: str, name: str) -> None:
    """Add a member (a person) to a workspace."""
    b = connect()
    emit(bus_call(lambda: b.member_add(workspace, name)))


@member_app.command("remove")
def member_remove(workspace: str, name: str) -> None:
    """Remove a member: the account is gone ("a former member")."""
    b = connect()
    emit(bus_call(lambda: b.member_remove(workspace, name)))


@item_app.command("post")
def item_post(
    sid: str, key: str, title: str = typer.Option(...), text: str | None = typer.Option(None)
) -> None:
    """Post an item for the members (again under the same key: a new revision)."""
    b = connect()
    emit(bus_call(lambda: b.item_post(sid, key, title=title, text=text)))


@item_app.command("settle")
def item_settle(
    sid: str, key: str, member: str = typer.Option(...), answer: str = typer.Option(...)
) -> None:
    """A member settles an item with an answer."""
    b = connect()
    emit(bus_call(lambda: b.item_settle(sid, key, member=member, answer=answer)))


@item_app.command("write")
def item_write(
    sid: str,
    key: str,
    member: str = typer.Option(...),
    text: str | None = typer.Option(None),
    image: list[str] | None = typer.Option(None, "--image", help="a picture path, repeatable"),
    root: Path | None = typer.Option(None, help="pictures must lie under it (default: cwd)"),
) -> None:
    """A member writes on an item (open or settled); the agent hears of it."""
    b = connect()
    emit(
        bus_call(
            lambda: b.item_write(
                sid, key, member=member, text=text, image_paths=image or [], root=root
            )
        )
    )


@app.command("read-inbox")
def read_inbox(sid: str) -> None:
    """Every item of the agent with its thread (Luke's read_inbox)."""
    b = connect()
    emit(bus_call(lambda: b.read_inbox(sid)))


@app.command("reply-inbox")
def reply_inbox(
    sid: str,
    key: str,
    text: str | None = typer.Option(None),
    image: list[str] | None = typer.Option(None, "--image", help="a picture path, repeatable"),
    root: Path | None = typer.Option(
        None, help="the sandbox pictures are read from (default: cwd)"
    ),
) -> None:
    """Words and/or pictures on one of the agent's items (Luke's reply_inbox)."""
    b = connect()
    emit(bus_call(lambda: b.reply_inbox(sid, key, text=text, image_paths=image or [], root=root)))


token_app = typer.Typer(
    help="Signed tokens for senders (needs INBOX_SECRET).", no_args_is_help=True
)
app.add_typer(token_app, name="token")


@token_app.command("issue")
def token_issue(
    session: str | None = typer.Option(None, help="bind the token to this session"),
    member: str | None = typer.Option(
        None, help="bind it to this member: WORKSPACE/NAME, or NAME with --workspace"
    ),
    workspace: str | None = typer.Option(None, help="the member's workspace"),
    scopes: str = typer.Option(
        ..., help="comma-separated: agent:inbox:read,agent:inbox:write,agent:thread:write"
    ),
    ttl: int | None = typer.Option(None, help="seconds until it expires (default: never)"),
) -> None:
    """Issue a token; a caller passes it in INBOX_TOKEN."""
    b = connect()
    wanted = [s.strip() for s in scopes.split(",") if s.strip()]
    if member and workspace and "/" not in member:
        member = f"{workspace}/{member}"
    emit(bus_call(lambda: b.issue_token(session=session, member=member, scopes=wanted, ttl_s=ttl)))


@token_app.command("revoke")
def token_revoke(token: str) -> None:
    """Revoke a token: every later use is refused."""
    b = connect()
    emit(bus_call(lambda: b.revoke_token(token)))


hooks_app = typer.Typer(help="Ready-made hook setups for harnesses.", no_args_is_help=True)
app.add_typer(hooks_app, name="hooks")
hook_app = typer.Typer(help="Entry points that harness hooks call.", no_args_is_help=True)
app.add_typer(hook_app, name="hook")


@hooks_app.command("claude")
def hooks_claude(
    install: Path | None = typer.Option(None, "--install", help="merge into this settings.json"),
    yes: bool = typer.Option(False, "--yes", "-y", help="write without asking"),
    command: str = typer.Option(
        "inbox", "--command", help="how the hooks call inbox (a full path if not on PATH)"
    ),
) -> None:
    """Print Claude Code's hooks settings for the inbox, or --install them."""
    from .hooks import print_or_install

    raise typer.Exit(print_or_install(install, yes, inbox_cmd=command))


@hook_app.command("claude")
def hook_claude(
    event: str = typer.Argument(
        ..., help="SessionStart|UserPromptSubmit|PostToolUse|Stop|SessionEnd"
    ),
) -> None:
    """Run one Claude Code hook (its JSON on stdin); exits 0 whatever breaks."""
    from .hooks import hook_entry

    raise typer.Exit(hook_entry(event))


def main() -> None:
    # Children (worker, scheduler) must not inherit a SIGINT-ignored state from a shell.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    app()


__all__ = ["app", "main"]


if __name__ == "__main__":
    main()
