"""The process commands: ``up``, ``upgrade``, ``repair-aof``, ``worker``, ``scheduler``, ``serve`` and ``flower``.

:func:`register` adds them to the CLI's app (``bus.surfaces.cli.app`` calls it once).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import Any

import typer

from bus.core.settings import ACTING_VARS, Settings
from bus.ops.procs import worker_argv
from bus.surfaces.refusal import bus_call, emit, run

from .calls import check_session_id, connect
from .help_panels import OPERATIONS


def up(
    concurrency: int = typer.Option(2, help="worker processes"),
    redis_port: int = typer.Option(0, help="also listen on this TCP port (0: socket only)"),
    listen: str = typer.Option(
        "",
        help="serve the embedded store to other machines on this address (with --redis-port"
        " and --clear-text: it has no TLS)",
    ),
    clear_text: bool = typer.Option(
        False, "--clear-text", help="allow --listen without TLS (warns; messages cross in clear)"
    ),
) -> None:
    """Run the bus here: embedded Redis (unless INBOX_REDIS_URL), a worker, the scheduler.

    Given INBOX_REDIS_URL, this home keeps it ($INBOX_HOME/store.env, 0600) for every later
    command; a store other machines can reach gets the line to run there printed."""
    from bus.ops.up import run_up

    settings = run(Settings.from_env)
    raise typer.Exit(
        run(
            lambda: run_up(
                settings,
                concurrency=concurrency,
                redis_port=redis_port,
                listen=listen,
                clear_text=clear_text,
            )
        )
    )


def repair_aof() -> None:
    """Repair the embedded server's damaged append-only file (keeps a copy, says what it cut)."""
    from bus.ops.aof_repair import repair_embedded_aof

    settings = run(Settings.from_env)
    emit(run(lambda: repair_embedded_aof(settings)))


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
    for name in ACTING_VARS:  # it never acts as whoever's shell started it
        os.environ.pop(name, None)
    os.execv(sys.executable, [*argv, *worker_argv(settings, concurrency, pool, loglevel)])


def scheduler(
    standby: bool = typer.Option(
        False,
        hidden=True,
        help="a spare (bus.ops.standby): import and build everything, then start only once"
        " a line arrives on stdin; exit 0 at end of input",
    ),
) -> None:
    """The scheduled work (debounced wakes, flushes, retries); `inbox up` runs it for you."""
    run(Settings.from_env)  # a bad setting is refused before anything starts
    for name in ACTING_VARS:  # it never acts as whoever's shell started it
        os.environ.pop(name, None)
    from bus.delivery.scheduler import run as run_scheduler

    b = connect()  # the dispatcher by name (INBOX_DISPATCHER): bus/ imports no workers
    if standby and not _promoted(b):
        return
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        run_scheduler(b.delivery, stop)
    except KeyboardInterrupt:
        pass


def _promoted(b: Any) -> bool:
    """A spare's wait: its dispatcher built (Celery imported) first, nothing connected;
    True once the supervisor's line arrives, False when its stdin ends."""
    from bus.delivery.dispatch import made_now

    with contextlib.suppress(Exception):  # the loop builds it again, and says why it fails
        made_now(b.delivery.dispatcher)
    if not sys.stdin.buffer.readline():
        return False  # dismissed (or the supervisor is gone): nothing was started
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # the supervisor's pipe is not the scheduler's to hold
    os.close(null)
    return True


def serve(
    host: str = typer.Option("127.0.0.1", help="bind address (loopback unless told otherwise)"),
    port: int = typer.Option(5252, help="port"),
) -> None:
    """The HTTP gateway: POST /send (local precedence), /v1/send, GET /health, /metrics, /openapi.json."""
    from bus.ops.serve_record import served
    from bus.surfaces.http.gateway import check_bind
    from bus.surfaces.http.gateway import serve as serve_http

    b = connect()
    run(lambda: check_bind(b, host))  # a non-loopback bind needs INBOX_SECRET
    with served(b.settings.home, host, port):  # `inbox doctor` asks the gateway on record
        serve_http(b, host=host, port=port)


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


def upgrade() -> None:
    """Upgrade the store's data to this release (`inbox up` does it at its start); name the wake commands waiting for your consent."""
    from bus.ops.upgrade import prepare

    settings = run(Settings.from_env)
    b = connect()
    emit(bus_call(lambda: prepare(b.store, settings, lambda line: print(line, file=sys.stderr))))


def register(app: typer.Typer) -> None:
    """Add the process commands to ``app``, in this order."""
    for command in (up, upgrade, repair_aof, worker, scheduler, serve, flower):
        app.command(rich_help_panel=OPERATIONS)(command)
