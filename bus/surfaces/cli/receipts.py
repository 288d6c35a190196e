"""``inbox receipt`` and ``inbox sent``: the sender's side of its messages.

:func:`register` adds them to the CLI's app (``bus.surfaces.cli.app`` calls it once).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer

from bus.surfaces.refusal import refuse

from .help_panels import EVERYDAY, arg, sid_arg


def register(
    app: typer.Typer,
    bus_call: Callable[[Callable[[], Any]], Any],
    emit: Callable[[Any], None],
    fail: Callable[[str, int], Any],
) -> None:
    """Add ``receipt`` and ``sent`` to ``app`` with the CLI's own error handling."""

    @app.command(rich_help_panel=EVERYDAY)
    def receipt(
        message_id: str = arg("MESSAGE_ID", "the id the send answered"),
        by: str | None = typer.Option(
            None, "--by", help="the sender session (default INBOX_SESSION)"
        ),
        wait_for: str | None = typer.Option(
            None, "--wait-for", help="noticed|read|answered: block until then (or a side exit)"
        ),
        timeout: float | None = typer.Option(None, help="seconds to wait with --wait-for"),
    ) -> None:
        """What became of a message you sent: stored, noticed, read, answered, or a side exit."""
        from bus.api import connect

        b = connect()
        out = bus_call(lambda: b.receipt(message_id, by=by, wait_for=wait_for, timeout=timeout))
        if out.get("ok") is False:  # a wait that timed out: the receipt, in the refusal shape
            rest = {k: v for k, v in out.items() if k not in ("ok", "error", "message")}
            refuse(str(out.get("error")), str(out.get("message")), 1, details=rest)
        emit(out)

    @app.command(rich_help_panel=EVERYDAY)
    def sent(
        sid: str = sid_arg("the sending session"),
        state: str | None = typer.Option(None, help="only messages in this state"),
        limit: int = typer.Option(50, help="at most this many, newest first (1-1000)"),
    ) -> None:
        """The session's outbox: its sent messages, newest first, each with its receipt."""
        from bus.api import connect

        b = connect()
        emit(bus_call(lambda: b.sent(sid, state=state, limit=limit)))
