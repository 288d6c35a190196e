"""The people commands: ``member``, ``item``, ``request``, ``decide``, ``read-inbox`` and
``reply-inbox`` (typed requests and items for the human members of a workspace).

:func:`register` adds them to the CLI's app (``bus.surfaces.cli.app`` calls it once).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from bus.surfaces.refusal import bus_call, emit

from .help_panels import PEOPLE, arg, sid_arg

if TYPE_CHECKING:
    from bus.api import Bus

WINDOW_HELP = "START/END[/TZ] (ISO-8601), repeatable"
IMAGE_HELP = "a picture path (relative to the current folder), repeatable"
ROOT_HELP = "pictures must lie under this folder (default: the current folder)"


def _images(paths: list[str] | None) -> list[str]:
    # Relative to where the command runs, as a shell user expects, not to --root.
    return [str(Path(p).absolute()) for p in paths or []]


def _windows(values: list[str] | None) -> list[dict[str, str]]:
    from bus.core.decisions import parse_window

    return [parse_window(v) for v in values or []]


def register(app: typer.Typer, connect: Callable[[], Bus]) -> None:
    """Add the people commands to ``app``; ``connect`` is the CLI's own (a bad setting is
    a refusal)."""
    member_app = typer.Typer(help="Members of a workspace.", no_args_is_help=True)
    app.add_typer(member_app, name="member", rich_help_panel=PEOPLE)
    item_app = typer.Typer(
        help="Items a session posts for the members of its workspace.", no_args_is_help=True
    )
    app.add_typer(item_app, name="item", rich_help_panel=PEOPLE)

    @app.command(rich_help_panel=PEOPLE)
    def request(
        to_id: str = typer.Option(..., "--to-id", help="the recipient session"),
        type_: str = typer.Option(..., "--type", help="meeting_request or task"),
        text: str = typer.Option(..., help="the request"),
        window: list[str] | None = typer.Option(None, "--window", help=WINDOW_HELP),
    ) -> None:
        """Open a typed request thread as INBOX_SESSION; prints {ok, thread, state}."""
        b = connect()
        emit(bus_call(lambda: b.request(to_id, type_, text, windows=_windows(window))))

    @app.command(rich_help_panel=PEOPLE)
    def decide(
        thread: str = arg("THREAD", "the typed thread (thr_...)"),
        decision: str = arg("DECISION", "accept, decline, counter, clarify or withdraw"),
        message: str | None = typer.Option(None, help="a note, at most 2000 characters"),
        window: list[str] | None = typer.Option(None, "--window", help=WINDOW_HELP),
    ) -> None:
        """Act on a typed thread as INBOX_SESSION; prints {ok, envelope_id, new_state}."""
        b = connect()
        emit(
            bus_call(lambda: b.decide(thread, decision, message=message, windows=_windows(window)))
        )

    @member_app.command("add")
    def member_add(
        workspace: str = arg("WORKSPACE", "the workspace"),
        name: str = arg("NAME", "the member's name"),
    ) -> None:
        """Add a member (a person) to a workspace."""
        b = connect()
        emit(bus_call(lambda: b.member_add(workspace, name)))

    @member_app.command("remove")
    def member_remove(
        workspace: str = arg("WORKSPACE", "the workspace"),
        name: str = arg("NAME", "the member's name"),
    ) -> None:
        """Remove a member: the account is gone ("a former member")."""
        b = connect()
        emit(bus_call(lambda: b.member_remove(workspace, name)))

    @member_app.command("link")
    def member_link(
        member: str = arg("MEMBER", "WORKSPACE/NAME"),
        ttl: int | None = typer.Option(None, help="seconds the link works (default: 7 days)"),
    ) -> None:
        """A sign-in link to the web inbox for a member (needs INBOX_SECRET; INBOX_UI_URL)."""
        b = connect()
        emit(bus_call(lambda: b.member_link(member, ttl_s=ttl)))

    @item_app.command("post")
    def item_post(
        sid: str = sid_arg("the posting session"),
        key: str = arg("KEY", "the item's key (its revisions share it)"),
        title: str = typer.Option(..., help="the item's title"),
        text: str | None = typer.Option(None, help="the item's text"),
    ) -> None:
        """Post an item for the members (again under the same key: a new revision)."""
        b = connect()
        emit(bus_call(lambda: b.item_post(sid, key, title=title, text=text)))

    @item_app.command("settle")
    def item_settle(
        sid: str = sid_arg("the session that posted the item"),
        key: str = arg("KEY", "the item's key"),
        member: str = typer.Option(..., help="the settling member (WORKSPACE/NAME or NAME)"),
        answer: str = typer.Option(..., help="the member's answer"),
    ) -> None:
        """A member settles an item with an answer."""
        b = connect()
        emit(bus_call(lambda: b.item_settle(sid, key, member=member, answer=answer)))

    @item_app.command("write")
    def item_write(
        sid: str = sid_arg("the session that posted the item"),
        key: str = arg("KEY", "the item's key"),
        member: str = typer.Option(..., help="the writing member (WORKSPACE/NAME or NAME)"),
        text: str | None = typer.Option(None, help="the words"),
        image: list[str] | None = typer.Option(None, "--image", help=IMAGE_HELP),
        root: Path | None = typer.Option(None, help=ROOT_HELP),
    ) -> None:
        """A member writes on an item (open or settled); the agent hears of it."""
        b = connect()
        emit(
            bus_call(
                lambda: b.item_write(
                    sid, key, member=member, text=text, image_paths=_images(image), root=root
                )
            )
        )

    @app.command("read-inbox", rich_help_panel=PEOPLE)
    def read_inbox(sid: str = sid_arg("the agent's session")) -> None:
        """Every item of the agent with its thread, oldest first."""
        b = connect()
        emit({"ok": True, **bus_call(lambda: b.read_inbox(sid))})

    @app.command("reply-inbox", rich_help_panel=PEOPLE)
    def reply_inbox(
        sid: str = sid_arg("the agent's session"),
        key: str = arg("KEY", "the item's key"),
        text: str | None = typer.Option(None, help="the words"),
        image: list[str] | None = typer.Option(None, "--image", help=IMAGE_HELP),
        root: Path | None = typer.Option(None, help=ROOT_HELP),
    ) -> None:
        """The agent writes words and/or pictures on one of its items."""
        b = connect()
        emit(
            bus_call(
                lambda: b.reply_inbox(sid, key, text=text, image_paths=_images(image), root=root)
            )
        )
