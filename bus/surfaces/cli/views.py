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
    """What keeps a session of this host from being woken or heard, and floor lines no drain could read: the reason and the fix (exit 1 when any)."""
    from bus.core.settings import Settings
    from bus.ops.doctor import doctor_report
    from bus.ops.upgrade import with_wake_consent
    from bus.telemetry.problems import CHECKS, bus_problems

    settings = run(Settings.from_env)
    report = run(lambda: doctor_report(settings.home, sids, settings=settings))
    report = run(lambda: with_wake_consent(report, settings, sids))
    if not sids:  # the whole bus too: hosts, floors, waiting messages, wakes
        report["problems"] += bus_problems(settings)
        report["ok"] = not report["problems"]
    server = report.get("server") or {}
    if server.get("state") not in (None, "ok", "too_old"):
        print(f"inbox doctor: the store's server: {server['message']}", file=sys.stderr)
    if report["problems"]:
        rows = report["problems"]
        unreachable = {p["session"] for p in rows if p.get("check") == "socket"}
        torn = {p["session"] for p in rows if p.get("check") == "malformed"}
        unwoken = {p["session"] for p in rows if p.get("check") == "wake_consent"}
        said = []
        if unreachable:
            said.append(
                f"{len(unreachable)} session(s) cannot be woken while idle nor hear a message"
                " mid-turn"
            )
        if torn:
            said.append(f"{len(torn)} session(s) have unreadable floor lines kept aside")
        if unwoken:
            said.append(
                f"{len(unwoken)} session(s) are not woken by their wake command until it is"
                " kept on this host"
            )
        too_old = server.get("state") == "too_old"
        if too_old:
            said.insert(0, str(server["message"]))
        durable = [p for p in rows if p.get("check") == "durability"]
        if durable:  # INBOX_DURABILITY this store cannot meet: every send refused
            said.insert(0, f"{durable[0]['reason']}: {durable[0]['effect']}")
        storage = [p for p in rows if p.get("check") == "storage"]
        if storage:  # the store refuses writes: said first, with its fix
            said.insert(0, f"{storage[0]['reason']}; fix: {storage[0]['fix']}")
        bus_wide = sorted({p["check"] for p in rows} & set(CHECKS))
        if bus_wide:
            said.append(f"{len(rows)} problem(s) in the bus: " + ", ".join(bus_wide))
        said = said or [f"{len(rows)} problem(s)"]
        code = (
            "store_refused"
            if storage
            else "not_durable"
            if durable
            else "unreachable"
            if unreachable
            else "malformed_lines"
            if torn
            else "wake_consent"
            if unwoken
            else "problems"
        )
        refuse(
            "server_too_old" if too_old and not storage and not durable else code,
            "; ".join(said),
            1,
            hint=None if unreachable or too_old else "each problem's fix is in the JSON on stdout",
            details={k: v for k, v in report.items() if k != "ok"},
        )
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
