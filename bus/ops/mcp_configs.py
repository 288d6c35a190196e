"""Where the harnesses keep the MCP servers they start, and which of them is ``inbox mcp``.

Claude Code keeps a user's servers in ``~/.claude.json`` (``$CLAUDE_CONFIG_DIR/.claude.json``
when set): ``mcpServers`` for every project, ``projects.<folder>.mcpServers`` for one
folder, and a project's own in its ``.mcp.json``. Codex keeps them in
``$CODEX_HOME/config.toml`` (``~/.codex/config.toml``) under ``[mcp_servers.<name>]``.
Each entry names a ``command``, its ``args`` and an ``env`` of its own (docs/harnesses.md
says how ``claude mcp add`` / ``codex mcp add`` write them). Reading them is a few file
reads: nothing is started here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# How each harness adds the server again, with the inbox on this PATH.
ADD = {
    "claude": 'claude mcp add --scope user inbox -- "$(command -v inbox)" mcp',
    "codex": 'codex mcp add inbox -- "$(command -v inbox)" mcp',
}


@dataclass(frozen=True)
class McpEntry:
    """One configured MCP server: the harness and file that start it, its name there."""

    harness: str
    config: str
    name: str
    command: str
    args: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)


def is_inbox_mcp(command: str, args: tuple[str, ...]) -> bool:
    """Whether ``command args`` starts ``inbox mcp``: the ``inbox`` program with ``mcp``,
    or a Python running the ``bus`` package's command line with it. Pure."""
    if not args or args[-1] != "mcp":
        return False
    if Path(command).name == "inbox" and len(args) == 1:
        return True
    return "-m" in args and args[args.index("-m") + 1 :][:1] in (
        ("bus",),
        ("bus.surfaces.cli.app",),
    )


def _entries(harness: str, config: Path, servers: object) -> list[McpEntry]:
    if not isinstance(servers, dict):
        return []
    out = []
    for name, spec in servers.items():
        if not isinstance(spec, dict) or not isinstance(spec.get("command"), str):
            continue
        args = tuple(str(a) for a in spec.get("args") or [] if isinstance(a, str | int))
        if not is_inbox_mcp(spec["command"], args):
            continue
        env = spec.get("env") if isinstance(spec.get("env"), dict) else {}
        out.append(
            McpEntry(
                harness=harness,
                config=str(config),
                name=str(name),
                command=spec["command"],
                args=args,
                env={str(k): str(v) for k, v in (env or {}).items()},
            )
        )
    return out


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _toml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return {}
    import tomllib  # only where Codex keeps a config

    try:
        return tomllib.loads(text)
    except ValueError:
        return {}


def inbox_mcp_entries(environ: Mapping[str, str], cwd: Path) -> list[McpEntry]:
    """Every configured ``inbox mcp`` a harness run from ``cwd`` under ``environ`` would
    start (its user's, this folder's, this project's), each once."""
    home = Path(environ.get("HOME") or Path.home())
    claude = Path(environ.get("CLAUDE_CONFIG_DIR") or home) / ".claude.json"
    found: list[McpEntry] = []
    user = _json(claude)
    found += _entries("claude", claude, user.get("mcpServers"))
    projects = user.get("projects")
    if isinstance(projects, dict) and isinstance(projects.get(str(cwd)), dict):
        found += _entries("claude", claude, projects[str(cwd)].get("mcpServers"))
    project = cwd / ".mcp.json"
    found += _entries("claude", project, _json(project).get("mcpServers"))
    codex = Path(environ.get("CODEX_HOME") or home / ".codex") / "config.toml"
    found += _entries("codex", codex, _toml(codex).get("mcp_servers"))
    seen: set[tuple[str, tuple[str, ...], tuple[tuple[str, str], ...]]] = set()
    unique = []
    for entry in found:
        key = (entry.command, entry.args, tuple(sorted(entry.env.items())))
        if key not in seen:
            seen.add(key)
            unique.append(entry)
    return unique


__all__ = ["ADD", "McpEntry", "inbox_mcp_entries", "is_inbox_mcp"]
