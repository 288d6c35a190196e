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
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import typer

from bus.core.durability import level_of
from bus.core.errors import BadInput, BusError
from bus.surfaces.refusal import bus_call, emit, fail, refuse, run, run_app

from . import harness_hooks, hosts, people, processes, receipts, tokens, views
from .calls import check_session_id, connect
from .floor_here import local_session
from .help_panels import EVERYDAY, HARNESS, arg, order, sid_arg, thread_arg
from .processes import worker_argv

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


def _print_version(value: bool) -> None:
    if value:
        from bus.core.version import __version__

        typer.echo(f"inbox {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="print the version"
    ),
) -> None:
    """The inbox that multi-agent swarms run on."""


session_app = typer.Typer(help="Register and close sessions.", no_args_is_help=True)
app.add_typer(session_app, name="session", rich_help_panel=EVERYDAY)


# -- sessions and turns -------------------------------------------------------------------


@session_app.command("open")
def session_open(
    sid: str = sid_arg("the new session's id (letters, digits, . _ -)"),
    handle: str | None = typer.Option(
        None, help="host:name (default: the session's own on a re-open, else <host>:<SID>)"
    ),
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
    durability: str | None = typer.Option(
        None,
        help="memory|disk|replica: what the store must have done before the send is "
        "acknowledged (default INBOX_DURABILITY); not met in time: not_durable, exit 1",
    ),
) -> None:
    """Send a message; prints {ok, id, thread, state, recipient, durable} (state stored, or
    answered with --wait)."""
    if durability is not None:  # checked before anything is read or written
        durability = bus_call(lambda: level_of(durability, "memory"))
    b = connect()
    if jsonl is not None:
        _send_jsonl(b, jsonl, durability)
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
    answer = bus_call(lambda: b.send(fields, wait=wait, timeout=timeout, durability=durability))
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
    rcpt = answer.get("recipient") or {}
    # A host whose worker is starting gets no line: it is delivered at the first beat.
    if rcpt.get("host_state") == "down":
        print(
            f"inbox send: host {rcpt.get('host')} is down (no worker beating): the message "
            f"is stored and waits for it; `inbox status` shows its hosts, `inbox doctor` why",
            file=sys.stderr,
        )
    elif rcpt.get("host_state") == "unseen":
        print(
            f"inbox send: no worker has served host {rcpt.get('host')} yet: the message is "
            f"stored and waits for one (run `inbox up` on that machine)",
            file=sys.stderr,
        )
    emit(answer)


def _default_sender(b: Bus) -> str:
    """Who a send is from when --from is not given: INBOX_SESSION's handle (the caller's
    own session), else the anonymous ``<host>:inbox`` of local single-user use."""
    sid = b.settings.session
    if sid:
        info = b.store.sessions.get_session(check_session_id(sid, "INBOX_SESSION"))
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


def _send_jsonl(b: Any, source: str, durability: str | None = None) -> None:
    """Stream the input through the batched ingest (:mod:`bus.services.send_many`). A stream cannot
    be refused whole before it is read, so each bad line is refused on its own, with its
    line number and nothing written for it, and the other lines go in. Each chunk is one
    batch (:meth:`bus.services.send_many.BatchSender.send_stream`: the next chunk is read
    and parsed while this one is written): a line over its sender's rate or into a full
    inbox is refused on its own, as a send would be. Each chunk is confirmed at the
    durability level once (its round trip's wait)."""
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
        stream = b.batches.send_stream(parsed(), durability=durability)
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
    local_session(b, sid)
    out = run(lambda: b.peek(sid, stamped=stamped))
    if stamped:
        sys.stdout.write(str(out) + ("\n" if out else ""))
    else:
        emit(out)


@app.command(rich_help_panel=HARNESS)
def drain(
    sid: str = sid_arg(), stamped: bool = typer.Option(False, help="model-facing text")
) -> None:
    """Claim the floor: lines move to log.jsonl; notices drained here are marked noticed.

    Unreadable lines are skipped, kept in malformed.jsonl and said (stderr, a malformed line)."""
    b = connect()
    local_session(b, sid)
    from bus.delivery.floor_result import skipped_words

    lines = run(lambda: b.drain(sid))
    assert isinstance(lines, list)
    words = skipped_words(lines)
    if words:
        sys.stderr.write(words + "\n")
    if stamped:
        out = b.render(lines)
        sys.stdout.write(out + ("\n" if out else ""))
    else:
        emit(lines)


@app.command(rich_help_panel=HARNESS)
def listen(
    sid: str = sid_arg(),
    exec_cmd: str | None = typer.Option(None, "--exec", help="pipe each line to CMD"),
) -> None:
    """A reference socket listener on inbox.sock that acks each line."""
    from bus.surfaces.harness.listener import run_listener

    b = connect()
    run(lambda: check_session_id(sid))
    b.receipts.heartbeat(sid)  # a listening harness counts as seen (not stale)
    if run_listener(b.floor, sid, exec_cmd):
        refuse(
            "not_listening",
            f"the listener of {sid} stopped: its socket vanished and could not be bound again",
            1,
            hint="see the line above; start `inbox listen` again once that is fixed",
        )


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


processes.register(app)  # `up`, `worker`, `scheduler`, `serve`, `flower`
views.register(app)  # `status`, `watch`, `top`, `doctor`
hosts.register(app)  # `host forget`


@app.command(rich_help_panel=HARNESS)
def mcp() -> None:
    """The MCP server on stdio (official mcp SDK)."""
    from bus.core.hook_env import load_hook_env
    from bus.surfaces.mcp_server import run_stdio

    # Started by a harness, as its hooks are: a password URL is kept for them, not passed.
    load_hook_env()
    run_stdio(connect())


people.register(app, connect)  # `member`, `item`, `request`, `decide`, `*-inbox`
tokens.register(app)  # `token issue`, `token revoke`
harness_hooks.register(app)  # `hooks claude|codex`, `hook claude|codex`


receipts.register(app, bus_call, emit, fail)  # `receipt` and `sent`
order(app)  # the help's panels: everyday, harness, people, operations


def main(argv: list[str] | None = None) -> None:
    """Run the command line; usage errors get the one refusal shape too."""
    # Children (worker, scheduler) must not inherit a SIGINT-ignored state from a shell.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.exit(run_app(app, argv))


class _Built:
    """``app`` with its click command built once: calling it is calling ``app`` (typer
    builds the command on every call, a few ms of a command's time)."""

    def __init__(self) -> None:
        self.command = typer.main.get_command(app)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.command(*args, **kwargs)


def prepared_runner() -> Any:
    """``run(argv) -> exit code``: :func:`main`'s run, with the command built and the
    library imported now (bus.surfaces.command_server forks from the process that calls this)."""
    # What the commands import on first use.
    import bus.api  # noqa: F401
    from bus.store.connection import reuse_clients

    reuse_clients()  # one command after another: a command reuses the last one's connection

    built = _Built()

    def run(argv: list[str]) -> int:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        return run_app(built, argv)  # type: ignore[arg-type]

    return run


__all__ = ["app", "main", "prepared_runner", "worker_argv"]


if __name__ == "__main__":
    main()
