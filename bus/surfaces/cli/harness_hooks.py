"""The hook commands: ``hooks claude|codex`` (print or install a harness's hook setup)
and ``hook claude|codex`` (the entry point each of those hooks calls).

:func:`register` adds them to the CLI's app (``bus.surfaces.cli.app`` calls it once).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import typer

from bus.surfaces.refusal import fail, run

from .help_panels import HARNESS, arg

hooks_app = typer.Typer(help="Ready-made hook setups for harnesses.", no_args_is_help=True)
hook_app = typer.Typer(help="Entry points that harness hooks call.", no_args_is_help=True)

COMMAND_HELP = "how the hooks call inbox (default: this inbox's absolute path)"
YES_HELP = "write without asking (needed with no terminal)"
EVENT_HELP = "SessionStart, UserPromptSubmit, PostToolUse, Stop or SessionEnd"


def _print_or_install(
    harness: str, install: Path | None, uninstall: Path | None, yes: bool, command: str | None
) -> None:
    """One harness's hooks printed, or installed into / removed from the file given."""
    from bus.surfaces.harness.hook_install import print_or_install

    if install is not None and uninstall is not None:
        fail("give --install PATH or --uninstall PATH, not both")
    path = install if install is not None else uninstall
    keys: list[str] = []
    if uninstall is not None and harness == "codex":
        from bus.surfaces.harness.codex_trust import own_keys

        keys = own_keys(uninstall.expanduser())  # before the file changes: their places
    code = run(
        lambda: print_or_install(
            path, yes, inbox_cmd=command, uninstall=uninstall is not None, harness=harness
        )
    )
    if code == 0 and install is not None and harness == "codex":
        from bus.surfaces.harness.codex_trust import print_trust

        print_trust(install.expanduser())  # what trusts them: printed, never written
    if code == 0 and keys:
        from bus.surfaces.harness.codex_trust import drop_trust
        from bus.surfaces.harness.codex_wake import codex_home

        config = codex_home() / "config.toml"
        dropped = run(lambda: drop_trust(keys, config))
        if dropped:
            typer.echo(f"removed the inbox hooks' {dropped} trust tables from {config}")
    raise typer.Exit(code)


def _hooks_command(harness: str, file: str, where: str, doc: str) -> Callable[..., None]:
    """The ``hooks HARNESS`` command: its hooks printed, or written into ``file``."""

    def hooks_command(
        install: Path | None = typer.Option(
            None, "--install", help=f"write the hooks into this {file} ({where})"
        ),
        uninstall: Path | None = typer.Option(
            None, "--uninstall", help=f"remove exactly the inbox hooks from this {file}"
        ),
        yes: bool = typer.Option(False, "--yes", "-y", help=YES_HELP),
        command: str | None = typer.Option(None, "--command", help=COMMAND_HELP),
    ) -> None:
        _print_or_install(harness, install, uninstall, yes, command)

    hooks_command.__doc__ = doc
    return hooks_command


hooks_app.command("claude")(
    _hooks_command(
        "claude",
        "settings.json",
        "replacing earlier ones",
        """Print Claude Code's hooks settings for the inbox, or --install / --uninstall them.

    Each hook command is this inbox's absolute path with INBOX_HOME, INBOX_REDIS_URL (and
    the other bus-locating settings) that are set now, so it works from Claude Code's
    own environment.""",
    )
)
hooks_app.command("codex")(
    _hooks_command(
        "codex",
        "hooks.json",
        "e.g. .codex/hooks.json",
        """Print Codex's hooks.json for the inbox, or --install / --uninstall it.

    Install into .codex/hooks.json (a project) or $CODEX_HOME/hooks.json (every session;
    CODEX_HOME is ~/.codex when unset); Codex runs the hooks once they are trusted:
    --install prints the $CODEX_HOME/config.toml lines that trust them (as the codex on PATH
    computes them), or trust them in Codex (/hooks); --uninstall takes those lines out
    again. With no terminal to ask on, give --yes.""",
    )
)


@hook_app.command("claude")
def hook_claude(event: str = arg("EVENT", EVENT_HELP)) -> None:
    """Run one Claude Code hook (its JSON on stdin); exits 0 whatever breaks."""
    from bus.surfaces.harness.hook_run import hook_entry

    raise typer.Exit(hook_entry(event))


@hook_app.command("codex")
def hook_codex(event: str = arg("EVENT", EVENT_HELP)) -> None:
    """Run one Codex hook (its JSON on stdin); exits 0 whatever breaks."""
    from bus.surfaces.harness.hook_run import hook_entry

    raise typer.Exit(hook_entry(event, harness="codex"))


def register(app: typer.Typer) -> None:
    """Add the ``hooks`` and ``hook`` groups to ``app``."""
    app.add_typer(hooks_app, name="hooks", rich_help_panel=HARNESS)
    app.add_typer(hook_app, name="hook", rich_help_panel=HARNESS)
