"""The ``inbox`` command line (the README's command table names every command and option).

Each command parses its input and makes one library call. Machine-facing commands print
one JSON document on stdout and exit 0. Every refusal has one shape on every command:
``{"ok": false, "error": code, "message": ...}`` on stdout, one line on stderr (with a
hint where there is one), and a non-zero exit (2 for bad input, 3 when Redis is down).
Heavy modules (the library, pydantic, redis) are imported inside the commands, so
``inbox --help`` stays quick.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from bus.core.errors import BadInput, BusError
from bus.core.settings import Settings
from bus.surfaces.refusal import bus_call, emit, fail, refuse, run, run_app

from . import people, receipts
from .help_panels import EVERYDAY, HARNESS, OPERATIONS, arg, order, sid_arg, thread_arg

if TYPE_CHECKING:
    from bus.api import Bus

app = typer.Typer(
    help="The inbox that multi-agent swarms run on.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Panels need rich help; markdown (not rich markup) keeps START/END[/TZ] literal.
    rich_markup_mode="markdown",
)
session_app = typer.Typer(help="Register and close sessions.", no_args_is_help=True)
app.add_typer(session_app, name="session", rich_help_panel=EVERYDAY)


def connect(**kw: Any) -> Bus:
    """The library's :func:`bus.api.connect`, imported when a command needs it."""
    from bus.api import connect as connect_bus

    return run(lambda: connect_bus(**kw))  # a bad setting (INBOX_*) is a refusal too


def check_session_id(sid: object, what: str = "session id") -> str:
    from bus.core.models import check_session_id as check

    return check(sid, what)


# -- sessions and turns -------------------------------------------------------------------


@session_app.command("open")
def session_open(
    sid: str = sid_arg("the new session's id (letters, digits, . _ -)"),
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
def session_close(sid: str = sid_arg()) -> None:
    """Close a session: waiting senders get the closing error; threads stay readable."""
    b = connect()
    emit(bus_call(lambda: b.close_session(sid)))


@app.command(rich_help_panel=HARNESS)
def turn(
    sid: str = sid_arg(),
    event: str = arg("EVENT", "start or end"),
    answer: str | None = typer.Option(None, help="the turn's answer (end)"),
    prompt_waiting: bool = typer.Option(False, help="a person's prompt waits behind this turn"),
) -> None:
    """Report a turn boundary: `inbox turn SID start` / `inbox turn SID end --answer T`."""
    if event not in ("start", "end"):
        fail(f"turn event must be start or end, not {event!r}")
    b = connect()
    emit(bus_call(lambda: b.turn(sid, event, answer=answer, prompt_waiting=prompt_waiting)))


# -- sending -------------------------------------------------------------------------------


@app.command(rich_help_panel=EVERYDAY)
def send(
    to: str | None = typer.Option(None, "--to", help="recipient handle host:name"),
    to_id: str | None = typer.Option(None, "--to-id", help="recipient session id"),
    sender: str | None = typer.Option(
        None, "--from", help="sender handle host:name (default: INBOX_SESSION's handle)"
    ),
    text: str | None = typer.Option(None, help="message text, 1-8000 characters"),
    klass: str | None = typer.Option(None, "--class", help="blocker|action|fyi|report"),
    urgency: str | None = typer.Option(None, help="queue|urgent"),
    pr: int | None = typer.Option(None, help="PR number (thread key)"),
    topic: str | None = typer.Option(None, help="topic (thread key)"),
    thread: str | None = typer.Option(None, help="thread id thr_..."),
    msg_id: str | None = typer.Option(None, "--id", help="message id (a resend is idempotent)"),
    wait: bool = typer.Option(False, help="block until the turn that carried it answers"),
    timeout: float | None = typer.Option(
        None, help="seconds to wait with --wait (default: until answered or closed)"
    ),
    jsonl: str | None = typer.Option(None, help="FILE or - : one wire-format message a line"),
) -> None:
    """Send a message; prints {ok, id, thread, state, recipient} (state stored, or answered
    with --wait)."""
    b = connect()
    if jsonl is not None:
        _send_jsonl(b, jsonl)
        return
    if to is None and to_id is None:
        fail("send needs --to HANDLE or --to-id SID")
    if text is None:
        fail("send needs --text")
    if not text.strip():
        fail("--text must not be blank (1-8000 characters)")
    fields: dict[str, Any] = {"text": text}
    if sender is not None:
        fields["from"] = sender
    elif not b.settings.secret:
        fields["from"] = bus_call(lambda: _default_sender(b))
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
    if answer.get("state") == "bounced":
        sid = (answer.get("recipient") or {}).get("session") or to_id or ""
        why = str(answer.get("reason") or f"no session {sid!r} is registered")
        refuse(
            "not_found",
            f"{why}; the message is kept as bounced (its receipt says so)",
            1,
            hint=f"open it with: inbox session open {sid}",
            details={k: v for k, v in answer.items() if k not in ("ok", "error", "message")},
        )
    if answer.get("error"):
        message = str(answer.get("reason") or answer["error"])
        refuse(str(answer["error"]), message, 1, details=answer)
    emit(answer)


def _default_sender(b: Bus) -> str:
    """Who a send is from when --from is not given: INBOX_SESSION's handle (the caller's
    own session), else the anonymous ``<host>:inbox`` of local single-user use."""
    sid = b.settings.session
    if sid:
        info = b.store.get_session(check_session_id(sid, "INBOX_SESSION"))
        return info.handle if info is not None else f"{b.settings.host}:{sid}"
    return f"{b.settings.host}:inbox"


JSONL_READ = 1 << 20  # bytes per read: a batch is what one read brings, up to BATCH_LINES
BATCH_LINES = 1000  # lines per batch: one ingest's round trips carry this many messages


def _line_chunks(fd: int) -> Iterator[list[str]]:
    """The input's complete lines, in the chunks the reads bring them. Each read returns
    what is there (it waits only when nothing is), so a producer that writes a line and
    waits for its answer gets it, and a file goes in batches."""
    rest = b""
    while data := os.read(fd, JSONL_READ):
        *lines, rest = (rest + data).split(b"\n")
        for at in range(0, len(lines), BATCH_LINES):
            yield [ln.decode("utf-8", "replace") for ln in lines[at : at + BATCH_LINES]]
    if rest:
        yield [rest.decode("utf-8", "replace")]


def _send_jsonl(b: Any, source: str) -> None:
    """Stream the input through the batched ingest (:mod:`bus.services.send_many`). A stream cannot
    be refused whole before it is read, so each bad line is refused on its own, with its
    line number and nothing written for it, and the other lines go in. Each chunk is one
    batch (:meth:`bus.services.send_many.BatchSender.send_stream`: the next chunk is read
    and parsed while this one is written): a line over its sender's rate or into a full
    inbox is refused on its own, as a send would be."""
    try:
        fd = sys.stdin.fileno() if source == "-" else os.open(source, os.O_RDONLY)
    except OSError as exc:
        fail(f"cannot read {source}: {exc.strerror}", 2)
    numbered: deque[list[tuple[int, Any]]] = deque()  # the chunks parsed, not yet answered

    def parsed() -> Iterator[list[Any]]:
        first_line = 1
        for chunk in _line_chunks(fd):
            rows = _numbered(chunk, first_line)
            first_line += len(chunk)
            numbered.append(rows)
            yield [item for _n, item in rows if not isinstance(item, BusError)]

    failed = 0
    try:
        stream = b.batches.send_stream(parsed())
        while (answers := bus_call(lambda: next(stream, None))) is not None:
            failed += _answer_chunk(numbered.popleft(), answers)
    finally:
        if source != "-":
            os.close(fd)
    if failed:
        raise typer.Exit(1)


def _numbered(chunk: list[str], first_line: int) -> list[tuple[int, Any]]:
    """Each non-blank line of ``chunk`` by its number: its JSON, or its refusal."""
    rows: list[tuple[int, Any]] = []
    for n, line in enumerate(chunk, first_line):
        if not line.strip():
            continue
        try:
            rows.append((n, json.loads(line)))
        except json.JSONDecodeError as exc:
            rows.append((n, BadInput(f"line {n} is not JSON: {exc}")))
    return rows


def _answer_chunk(numbered: list[tuple[int, Any]], answers: list[Any]) -> int:
    """Write each line's answer in order (a refusal with its line number); the number
    refused."""
    got = iter(answers)
    failed = 0
    out: list[str] = []  # the chunk's answers in one write: a flush a line was a tenth of it
    dumps = json.JSONEncoder(ensure_ascii=False).encode
    for n, item in numbered:
        r = item if isinstance(item, BusError) else next(got)
        if isinstance(r, BusError):
            failed += 1
            out.append(dumps({**r.to_json(), "line": n}))
        elif r.get("error"):  # inbox_full: refused, nothing stored
            failed += 1
            out.append(dumps({**r, "line": n}))
        else:
            out.append(dumps(r))
    if out:
        sys.stdout.write("\n".join(out) + "\n")
        sys.stdout.flush()
    return failed


@app.command(rich_help_panel=HARNESS)
def deliver(
    sid: str = sid_arg("the local session whose floor gets the line"),
    sender: str = typer.Option(..., "--from", help="sender handle host:name"),
    text: str = typer.Option(..., help="message text"),
    urgency: str = typer.Option("queue", help="queue|urgent"),
) -> None:
    """Put one line straight on a local session's floor (its socket if a harness listens,
    else its file); needs no Redis and makes no thread."""
    b = connect()
    emit(run(lambda: b.deliver_local(sid, sender=sender, text=text, urgency=urgency)))


@app.command(rich_help_panel=HARNESS)
def peek(
    sid: str = sid_arg(), stamped: bool = typer.Option(False, help="model-facing text")
) -> None:
    """Read the floor without consuming it."""
    b = connect()
    _local_session(b, sid)
    out = run(lambda: b.peek(sid, stamped=stamped))
    if stamped:
        sys.stdout.write(str(out) + ("\n" if out else ""))
    else:
        emit(out)


@app.command(rich_help_panel=HARNESS)
def drain(
    sid: str = sid_arg(), stamped: bool = typer.Option(False, help="model-facing text")
) -> None:
    """Claim the floor: lines move to log.jsonl; notices drained here are marked noticed."""
    b = connect()
    _local_session(b, sid)
    out = run(lambda: b.drain(sid, stamped=stamped))
    if stamped:
        sys.stdout.write(str(out) + ("\n" if out else ""))
    else:
        emit(out)


def _local_session(b: Bus, sid: str) -> None:
    """Refuse a session that has no inbox on this host (works with Redis down)."""
    if not run(lambda: b.floor.session_dir(sid)).is_dir():
        refuse(
            "not_found",
            f"no session {sid!r} has an inbox here ({b.settings.home})",
            1,
            hint=f"open it with: inbox session open {sid} (same INBOX_HOME and INBOX_HOST)",
        )


@app.command(rich_help_panel=HARNESS)
def listen(
    sid: str = sid_arg(),
    exec_cmd: str | None = typer.Option(None, "--exec", help="pipe each line to CMD"),
) -> None:
    """A reference socket listener on inbox.sock that acks each line."""
    from bus.surfaces.listener import run_listener

    b = connect()
    run(lambda: check_session_id(sid))
    b.receipts.heartbeat(sid)  # a listening harness counts as seen (not stale)
    run_listener(b.floor, sid, exec_cmd)


@app.command(rich_help_panel=EVERYDAY)
def threads(sid: str = sid_arg()) -> None:
    """The session's threads, newest first."""
    b = connect()
    emit(bus_call(lambda: b.threads(sid)))


@app.command(rich_help_panel=EVERYDAY)
def read(
    sid: str = sid_arg("the reading session (a party of the thread)"),
    thread: str = thread_arg(),
    mark_read: bool = typer.Option(False, "--mark-read", help="mark its messages read"),
) -> None:
    """A whole thread, oldest first (refused for a session that is not a party)."""
    b = connect()
    emit(bus_call(lambda: b.read(sid, thread, mark_read=mark_read)))


@app.command(rich_help_panel=EVERYDAY)
def reply(
    sid: str = sid_arg("the answering session (a party of the thread)"),
    thread: str = thread_arg(),
    text: str = typer.Option(..., help="the answer"),
) -> None:
    """Answer into the other parties' inboxes under THREAD; never a turn for them."""
    b = connect()
    emit(bus_call(lambda: b.reply(sid, thread, text)))


@app.command(rich_help_panel=EVERYDAY)
def withdraw(
    message_id: str = arg("MESSAGE_ID", "the id the send answered"),
    by: str = typer.Option(..., "--by", help="the sender session"),
) -> None:
    """Unsend a message no notice carried yet, else retract it into its thread."""
    b = connect()
    emit(bus_call(lambda: b.withdraw(message_id, by)))


@app.command(rich_help_panel=EVERYDAY)
def status() -> None:
    """Sessions, their states and queue backlogs."""
    b = connect()
    emit(bus_call(b.status))


# -- processes -----------------------------------------------------------------------------


@app.command(rich_help_panel=OPERATIONS)
def up(
    concurrency: int = typer.Option(2, help="worker processes"),
    redis_port: int = typer.Option(0, help="also listen on this TCP port (0: socket only)"),
) -> None:
    """Run the bus here: embedded Redis (unless INBOX_REDIS_URL), a worker, the scheduler."""
    from bus.ops.up import run_up

    settings = run(Settings.from_env)
    raise typer.Exit(run(lambda: run_up(settings, concurrency=concurrency, redis_port=redis_port)))


def worker_argv(settings: Settings, concurrency: int, pool: str, loglevel: str) -> list[str]:
    from bus.telemetry.liveness import SHARED_QUEUE, host_queue

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


@app.command(rich_help_panel=OPERATIONS)
def worker(
    concurrency: int = typer.Option(2, help="processes"),
    pool: str = typer.Option("prefork", help="prefork|solo|threads"),
    loglevel: str = typer.Option("info"),
) -> None:
    """A Celery worker for this host (INBOX_HOST); `inbox up` runs one for you.

    Refused (exit 5) while a worker with another INBOX_HOME or machine serves the host;
    stops (exit 6) once its INBOX_HOME is gone."""
    settings = run(Settings.from_env)
    run(lambda: check_session_id(settings.host, "host name"))
    # Celery runs in its own program (bus/ never imports Celery): this process becomes it.
    argv = [sys.executable, "-m", "celery", "-A", "workers"]
    os.execv(sys.executable, [*argv, *worker_argv(settings, concurrency, pool, loglevel)])


@app.command(rich_help_panel=OPERATIONS)
def scheduler() -> None:
    """The scheduled work (debounced wakes, flushes, retries); `inbox up` runs it for you."""
    run(Settings.from_env)  # a bad setting is refused before anything starts
    from bus.delivery.scheduler import run as run_scheduler

    b = connect()  # the dispatcher by name (INBOX_DISPATCHER): bus/ imports no workers
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        run_scheduler(b, stop)
    except KeyboardInterrupt:
        pass


@app.command(rich_help_panel=OPERATIONS)
def serve(
    host: str = typer.Option("127.0.0.1", help="bind address (loopback unless told otherwise)"),
    port: int = typer.Option(5252, help="port"),
) -> None:
    """The HTTP gateway: POST /send (local precedence), /v1/send, GET /health, /metrics, /openapi.json."""
    from bus.surfaces.http.gateway import check_bind
    from bus.surfaces.http.gateway import serve as serve_http

    b = connect()
    run(lambda: check_bind(b, host))  # a non-loopback bind needs INBOX_SECRET
    serve_http(b, host=host, port=port)


@app.command(rich_help_panel=EVERYDAY)
def watch(
    sids: list[str] | None = typer.Argument(
        None, metavar="[SID]...", help="the sessions to follow", show_default=False
    ),
    all_sessions: bool = typer.Option(False, "--all", help="every session, newcomers included"),
    since: str = typer.Option("$", help="$ (only new), 0-0 (all still kept) or a stream id"),
    lanes: list[str] | None = typer.Option(
        None, "--lanes", help="also the sessions SID started or gave work to (repeatable)"
    ),
    name: str | None = typer.Option(
        None, "--name", help="a durable subscription: resumes after a restart, nothing missed"
    ),
    reset: bool = typer.Option(False, "--reset", help="with --name: start it again from now"),
) -> None:
    """Follow messages live: one JSON line per message, until Ctrl-C."""
    from bus.services.watch import run_watch

    if all_sessions == bool(sids or lanes):
        fail("watch needs SID..., --lanes SID or --all (--all alone)")
    if name is None and reset:
        fail("--reset needs --name")
    if name is not None and since != "$":
        fail("--since does not go with --name: a durable subscription resumes at its cursor")
    b = connect()
    sessions = None if all_sessions else run(lambda: [check_session_id(s) for s in sids or []])
    owners = run(lambda: [check_session_id(s) for s in lanes or []])
    bus_call(lambda: run_watch(b, sessions, since=since, lanes_of=owners, name=name, reset=reset))


@app.command(rich_help_panel=EVERYDAY)
def top(
    interval: float = typer.Option(1.0, help="seconds between refreshes"),
    once: bool = typer.Option(False, "--once", help="print the table once and exit"),
) -> None:
    """Sessions live: state, turns, unread, new, backlog and age, until Ctrl-C.

    Without a terminal (a pipe, a file) it prints a plain table once."""
    from bus.services.watch import plain_top, render_top, run_top, top_rows

    b = connect()
    if not sys.stdout.isatty():
        sys.stdout.write(plain_top(bus_call(lambda: top_rows(b))) + "\n")
    elif once:
        from rich.console import Console

        Console().print(render_top(bus_call(lambda: top_rows(b))))
    else:
        bus_call(lambda: run_top(b, interval))


@app.command(rich_help_panel=HARNESS)
def mcp() -> None:
    """The MCP server on stdio (official mcp SDK)."""
    from bus.surfaces.mcp_server import run_stdio

    run_stdio(connect())


@app.command(rich_help_panel=OPERATIONS)
def flower(
    address: str = typer.Option("127.0.0.1", help="bind address"),
    port: int = typer.Option(5555),
    basic_auth: str | None = typer.Option(
        None,
        help="user:password (default INBOX_FLOWER_AUTH, else generated into "
        "$INBOX_HOME/flower.auth; its path is printed, never the password)",
    ),
) -> None:
    """Flower for the workers, with authentication, bound to loopback by default."""
    from bus.ops.flower import run_flower

    raise typer.Exit(
        run(
            lambda: run_flower(
                run(Settings.from_env), address=address, port=port, basic_auth=basic_auth
            )
        )
    )


people.register(app, connect)  # `member`, `item`, `request`, `decide`, `*-inbox`


token_app = typer.Typer(
    help="Signed tokens for senders (needs INBOX_SECRET).", no_args_is_help=True
)
app.add_typer(token_app, name="token", rich_help_panel=OPERATIONS)


@token_app.command("issue")
def token_issue(
    session: str | None = typer.Option(None, help="bind the token to this session"),
    member: str | None = typer.Option(
        None, help="bind it to this member: WORKSPACE/NAME, or NAME with --workspace"
    ),
    workspace: str | None = typer.Option(None, help="the member's workspace"),
    scopes: str | None = typer.Option(
        None, help="comma-separated: agent:inbox:read,agent:inbox:write,agent:thread:write"
    ),
    ttl: int | None = typer.Option(None, help="seconds until it expires (default: never)"),
    operator: str | None = typer.Option(
        None, help="an operator of the web inbox (sign in at /ui/login?token=...)"
    ),
) -> None:
    """Issue a token; a caller passes it in INBOX_TOKEN."""
    from bus.trust.tokens import SCOPE_OPERATOR

    b = connect()
    if scopes is None and not operator:
        fail("--scopes is required (or --operator NAME)")
    wanted = [s.strip() for s in (scopes or SCOPE_OPERATOR).split(",") if s.strip()]
    if member and workspace and "/" not in member:
        member = f"{workspace}/{member}"
    emit(
        bus_call(
            lambda: b.issue_token(
                session=session, member=member, scopes=wanted, ttl_s=ttl, operator=operator
            )
        )
    )


@token_app.command("revoke")
def token_revoke(token: str = arg("TOKEN", "the token to revoke")) -> None:
    """Revoke a token: every later use is refused."""
    b = connect()
    emit(bus_call(lambda: b.revoke_token(token)))


hooks_app = typer.Typer(help="Ready-made hook setups for harnesses.", no_args_is_help=True)
app.add_typer(hooks_app, name="hooks", rich_help_panel=HARNESS)
hook_app = typer.Typer(help="Entry points that harness hooks call.", no_args_is_help=True)
app.add_typer(hook_app, name="hook", rich_help_panel=HARNESS)


@hooks_app.command("claude")
def hooks_claude(
    install: Path | None = typer.Option(
        None, "--install", help="write the hooks into this settings.json (replacing earlier ones)"
    ),
    uninstall: Path | None = typer.Option(
        None, "--uninstall", help="remove exactly the inbox hooks from this settings.json"
    ),
    yes: bool = typer.Option(
        False, "--yes", "-y", help="write without asking (needed with no terminal)"
    ),
    command: str | None = typer.Option(
        None, "--command", help="how the hooks call inbox (default: this inbox's absolute path)"
    ),
) -> None:
    """Print Claude Code's hooks settings for the inbox, or --install / --uninstall them.

    Each hook command is this inbox's absolute path with INBOX_HOME, INBOX_REDIS_URL (and
    the other bus-locating settings) that are set now, so it works from Claude Code's
    own environment."""
    from bus.surfaces.hooks import print_or_install

    if install is not None and uninstall is not None:
        fail("give --install PATH or --uninstall PATH, not both")
    path = install if install is not None else uninstall
    raise typer.Exit(
        run(lambda: print_or_install(path, yes, inbox_cmd=command, uninstall=uninstall is not None))
    )


@hooks_app.command("codex")
def hooks_codex(
    install: Path | None = typer.Option(
        None, "--install", help="write the hooks into this hooks.json (e.g. .codex/hooks.json)"
    ),
    uninstall: Path | None = typer.Option(
        None, "--uninstall", help="remove exactly the inbox hooks from this hooks.json"
    ),
    yes: bool = typer.Option(
        False, "--yes", "-y", help="write without asking (needed with no terminal)"
    ),
    command: str | None = typer.Option(
        None, "--command", help="how the hooks call inbox (default: this inbox's absolute path)"
    ),
) -> None:
    """Print Codex's hooks.json for the inbox, or --install / --uninstall it.

    Install into .codex/hooks.json (a project) or ~/.codex/hooks.json (every session); Codex
    runs the hooks once they are trusted (/hooks in Codex)."""
    from bus.surfaces.hooks import print_or_install

    if install is not None and uninstall is not None:
        fail("give --install PATH or --uninstall PATH, not both")
    path = install if install is not None else uninstall
    raise typer.Exit(
        run(
            lambda: print_or_install(
                path, yes, inbox_cmd=command, uninstall=uninstall is not None, harness="codex"
            )
        )
    )


@hook_app.command("claude")
def hook_claude(
    event: str = arg("EVENT", "SessionStart, UserPromptSubmit, PostToolUse, Stop or SessionEnd"),
) -> None:
    """Run one Claude Code hook (its JSON on stdin); exits 0 whatever breaks."""
    from bus.surfaces.hooks import hook_entry

    raise typer.Exit(hook_entry(event))


@hook_app.command("codex")
def hook_codex(
    event: str = arg("EVENT", "SessionStart, UserPromptSubmit, PostToolUse, Stop or SessionEnd"),
) -> None:
    """Run one Codex hook (its JSON on stdin); exits 0 whatever breaks."""
    from bus.surfaces.hooks import hook_entry

    raise typer.Exit(hook_entry(event, harness="codex"))


receipts.register(app, bus_call, emit, fail)  # `receipt` and `sent`
order(app)  # the help's panels: everyday, harness, people, operations


def main(argv: list[str] | None = None) -> None:
    """Run the command line; usage errors get the one refusal shape too."""
    # Children (worker, scheduler) must not inherit a SIGINT-ignored state from a shell.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.exit(run_app(app, argv))


__all__ = ["app", "main"]


if __name__ == "__main__":
    main()
