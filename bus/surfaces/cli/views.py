"""The read views and checks: ``status``, ``watch``, ``top`` and ``doctor``.

:func:`register` adds them to the CLI's app (``bus.surfaces.cli.app`` calls it once).
"""

from __future__ import annotations

import sys

import typer

from bus.surfaces.refusal import bus_call, emit, fail, refuse, run

from .calls import check_session_id, connect
from .help_panels import EVERYDAY, OPERATIONS


def status() -> None:
    """Sessions, their states and queue backlogs."""
    b = connect()
    emit(bus_call(b.status))


def doctor(
    sids: list[str] | None = typer.Argument(
        None,
        metavar="[SID]...",
        help="the sessions to check (default: every one on this host's floor)",
        show_default=False,
    ),
) -> None:
    """What keeps a session of this host from being woken or heard, floor lines no drain could read, and (naming no session) the whole bus and the HTTP gateway and MCP servers set up here: the reason and the fix (exit 1 when any)."""
    from bus.core.settings import Settings
    from bus.ops.doctor import run_doctor
    from bus.ops.doctor_verdict import server_note, verdict

    settings = run(Settings.from_env)
    report = run(lambda: run_doctor(settings, sids))
    note = server_note(report.get("server"))
    if note:
        print(f"inbox doctor: {note}", file=sys.stderr)
    said = verdict(report["problems"], report.get("server"))
    if said is not None:
        details = {k: v for k, v in report.items() if k != "ok"}
        refuse(said.code, said.message, 1, hint=said.hint, details=details)
    emit(report)


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

    if all_sessions == bool(sids or lanes):
        fail("watch needs SID..., --lanes SID or --all (--all alone)")
    if name is None and reset:
        fail("--reset needs --name")
    if name is not None and since != "$":
        fail("--since does not go with --name: a durable subscription resumes at its cursor")
    b = connect()
    sessions = None if all_sessions else run(lambda: [check_session_id(s) for s in sids or []])
    owners = run(lambda: [check_session_id(s) for s in lanes or []])
    bus_call(
        lambda: b.watch.run_watch(sessions, since=since, lanes_of=owners, name=name, reset=reset)
    )


def top(
    interval: float = typer.Option(1.0, help="seconds between refreshes"),
    once: bool = typer.Option(False, "--once", help="print the table once and exit"),
) -> None:
    """Sessions live: state, turns, unread, new, backlog and age, until Ctrl-C.

    Without a terminal (a pipe, a file) it prints a plain table once."""
    from bus.services.watch import plain_top, render_top

    b = connect()
    if not sys.stdout.isatty():
        sys.stdout.write(plain_top(bus_call(lambda: b.watch.top_rows())) + "\n")
    elif once:
        from rich.console import Console

        Console().print(render_top(bus_call(lambda: b.watch.top_rows())))
    else:
        bus_call(lambda: b.watch.run_top(interval))


def register(app: typer.Typer) -> None:
    """Add the views to ``app``, in this order (the help lists each panel's in it)."""
    for command in (status, watch, top):
        app.command(rich_help_panel=EVERYDAY)(command)
    app.command(rich_help_panel=OPERATIONS)(doctor)
