"""The ``host`` commands: ``inbox host forget HOST`` (a host gone for good).

:func:`register` adds them to the CLI's app (``bus.surfaces.cli.app`` calls it once).
"""

from __future__ import annotations

import typer

from bus.surfaces.refusal import bus_call, emit

from .calls import connect
from .help_panels import OPERATIONS, arg

host_app = typer.Typer(help="The hosts of the bus.", no_args_is_help=True)


@host_app.command("forget")
def host_forget(host: str = arg("HOST", "the host's name (INBOX_HOST of its `inbox up`)")) -> None:
    """Forget a host gone for good: its heartbeats, floor claim, kick list and queue leave `inbox status`. Refused (exit 1, nothing written) while it is up or starting, or has sessions open (close them first); its closed sessions' records stay."""
    b = connect()
    emit(bus_call(lambda: b.forget_host(host)))


def register(app: typer.Typer) -> None:
    """Add ``host`` to ``app``, among the operations."""
    app.add_typer(host_app, name="host", rich_help_panel=OPERATIONS)
