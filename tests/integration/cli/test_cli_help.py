"""``inbox --help`` reads well: commands grouped in panels, nothing cut short, every
argument named and explained, and a group without its command exits as typer's do."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import Any

import pytest
import typer.main

from bus.surfaces.cli.app import app, main
from bus.surfaces.cli.help_panels import PANELS


def help_of(*command: str) -> str:
    env = {**os.environ, "COLUMNS": "250", "TERM": "dumb"}
    out = subprocess.run(
        [sys.executable, "-m", "bus.surfaces.cli.app", *command, "--help"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def commands(group: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    found = []
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            found += commands(command, (*path, name))
        else:
            found.append(((*path, name), command))
    return found


CLICK: Any = typer.main.get_command(app)
ALL = commands(CLICK)


def test_the_top_help_groups_every_command_in_the_panels_in_order() -> None:
    text = help_of()
    titles = [t for t in PANELS if f"─ {t} ─" in text]
    assert titles == list(PANELS)
    assert text.index(PANELS[0]) < text.index(PANELS[1]) < text.index(PANELS[2])
    assert text.index(PANELS[2]) < text.index(PANELS[3])
    assert "─ Commands ─" not in text  # no command is left outside a panel
    for name, command in CLICK.commands.items():
        assert command.rich_help_panel in PANELS, name
        assert re.search(rf"│ {re.escape(name)} ", text), name


def test_the_plumbing_is_under_operations_or_harness() -> None:
    panel = {name: c.rich_help_panel for name, c in CLICK.commands.items()}
    assert panel["worker"] == panel["scheduler"] == panel["up"] == PANELS[3]
    assert panel["hook"] == panel["deliver"] == panel["drain"] == PANELS[1]
    assert panel["send"] == panel["threads"] == panel["status"] == PANELS[0]
    assert panel["member"] == panel["read-inbox"] == PANELS[2]


def test_no_description_is_cut_short() -> None:
    text = " ".join(help_of().replace("│", " ").split())
    for name, command in CLICK.commands.items():
        first = " ".join((command.help or "").split("\n\n")[0].replace("`", "").split())
        assert first in text, name  # whole, not "..." after 45 characters


@pytest.mark.parametrize(("path", "command"), ALL, ids=[" ".join(p) for p, _c in ALL])
def test_every_argument_has_help_and_usage_names_it_plainly(
    path: tuple[str, ...], command: Any
) -> None:
    for param in command.params:
        if param.param_type_name == "argument":
            assert param.help, f"inbox {' '.join(path)}: {param.name} has no help"
            assert param.metavar and param.metavar.isupper(), param.name
    usage = next(ln for ln in help_of(*path).splitlines() if "Usage:" in ln)
    assert "{" not in usage and "}" not in usage, usage


@pytest.mark.parametrize("argv", [[], ["session"], ["token"], ["drain"], ["turn"]])
def test_a_command_or_group_given_nothing_exits_2(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        main(argv)
    out, err = capsys.readouterr()
    assert done.value.code == 2
    if argv in ([], ["session"], ["token"]):
        assert "Usage: inbox" in out and err == ""  # the group's help, as typer prints it
    else:
        assert '"error": "usage"' in out and "Missing argument" in err
        assert ".;" not in err


def test_help_shows_colon_words_as_written_not_as_rich_emoji() -> None:
    from rich._emoji_codes import EMOJI

    issue = help_of("token", "issue")
    assert "agent:inbox:read,agent:inbox:write,agent:thread:write" in issue
    assert "🧵" not in issue
    # Every `:name:` that rich knows as an emoji, in any command's help, is shown as such.
    for path, command in ALL:
        texts = [command.help or "", *(getattr(p, "help", None) or "" for p in command.params)]
        codes = {c for t in texts for c in re.findall(r":([a-z_]+):", t) if c in EMOJI}
        if codes:
            shown = help_of(*path)
            for code in codes:
                assert f":{code}:" in shown and EMOJI[code] not in shown, (path, code)
