"""How ``inbox --help`` reads: commands grouped in panels, arguments named and explained.

Typer's rich help panels do the grouping; :func:`order` puts the panels (and the commands
in each) in the order below, whatever order the commands were registered in, and gives
every command usage lines in the common form (``inbox drain [OPTIONS] SID``; typer alone
writes a required argument as ``{SID}``). Help is shown as written: typer's Markdown
help would turn a ``:name:`` in it into rich's emoji (the scope ``agent:thread:write``
into ``agent🧵write``), so :func:`verbatim` switches that off before a help is drawn.
"""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup

EVERYDAY = "Everyday"
HARNESS = "Harness (what a harness and its hooks call)"
PEOPLE = "People (members, items, requests)"
OPERATIONS = "Operations (running the bus)"
PANELS = (EVERYDAY, HARNESS, PEOPLE, OPERATIONS)


def arg(metavar: str, help: str) -> Any:
    """A required argument shown as ``METAVAR`` in the usage line, with its help."""
    return typer.Argument(..., metavar=metavar, help=help, show_default=False)


def sid_arg(help: str = "the session id") -> Any:
    return arg("SID", help)


def thread_arg() -> Any:
    return arg("THREAD", "the thread id (thr_...)")


class _NoEmoji:
    """Stands in for rich's ``Emoji`` in typer's help: replaces nothing."""

    @staticmethod
    def replace(text: str) -> str:
        return text


def verbatim() -> None:
    """Help text as written: no ``:name:`` turned into an emoji. Typer's Markdown help
    mode calls ``rich.emoji.Emoji.replace`` on every help text with no way to turn it
    off; its help module is imported only to draw a help (so a hook's start stays quick),
    hence here, just before."""
    from typer import rich_utils

    rich_utils.Emoji = _NoEmoji  # type: ignore[assignment,misc]


class Group(TyperGroup):
    """A group whose help is drawn as written (:func:`verbatim`)."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        verbatim()
        super().format_help(ctx, formatter)


class Command(TyperCommand):
    """A command whose usage line names a required argument ``SID``, an optional ``[SID]``;
    its help drawn as written (:func:`verbatim`)."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        verbatim()
        super().format_help(ctx, formatter)

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if isinstance(param, TyperArgument):
                name = param.display_name_raw
                name = name if param.required else f"[{name}]"
                pieces.append(name + ("..." if param.nargs != 1 else ""))
            else:
                pieces.extend(param.get_usage_pieces(ctx))
        return pieces


def order(app: typer.Typer) -> None:
    """Sort ``app``'s commands and groups by panel (stable: registration order within);
    every command, in its groups too, gets :class:`Command`'s usage line."""

    def rank(info: Any) -> int:
        panel = info.rich_help_panel
        return PANELS.index(panel) if panel in PANELS else len(PANELS)

    app.registered_commands.sort(key=rank)
    app.registered_groups.sort(key=rank)
    commands = list(app.registered_commands)
    if app.info.cls in (None, TyperGroup):
        app.info.cls = Group
    for group in app.registered_groups:
        if group.cls in (None, TyperGroup):
            group.cls = Group
        if group.typer_instance is not None:
            commands += group.typer_instance.registered_commands
            if group.typer_instance.info.cls in (None, TyperGroup):
                group.typer_instance.info.cls = Group
    for command in commands:
        if command.cls in (None, TyperCommand):
            command.cls = Command


__all__ = ["EVERYDAY", "HARNESS", "OPERATIONS", "PANELS", "PEOPLE", "arg", "order", "sid_arg"]
