"""Installing a harness's hooks: print them, or write them into / remove them from the
harness's settings file (Claude Code's ``settings.json``, Codex's ``hooks.json``).

The user's own hooks stay as they are; the file is replaced atomically with its mode kept;
a Redis URL with a password goes to ``$INBOX_HOME/hooks.env.json`` (0600), never into
the settings (:mod:`bus.core.hook_env`).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bus.core import hook_env as _env
from bus.core.errors import BadInput, Refused

from .hooks import claude_settings, inbox_program, is_own_command

# -- installing the settings ---------------------------------------------------------------


def remove_own(settings: dict[str, Any], harness: str | None = None) -> dict[str, Any]:
    """``settings`` without the hooks this tool wrote; the user's own hooks stay as they are."""
    merged = dict(settings)
    current = merged.get("hooks")
    if not isinstance(current, dict):
        return merged
    kept_events: dict[str, Any] = {}
    for event, entries in current.items():
        if not isinstance(entries, list):
            kept_events[event] = entries
            continue
        groups = []
        for entry in entries:
            inner = entry.get("hooks") if isinstance(entry, dict) else None
            if not isinstance(inner, list):
                groups.append(entry)
                continue
            left = [
                h
                for h in inner
                if not (isinstance(h, dict) and is_own_command(h.get("command"), harness))
            ]
            if len(left) == len(inner):
                groups.append(entry)
            elif left:
                groups.append({**entry, "hooks": left})
        if groups:
            kept_events[event] = groups
    if kept_events:
        merged["hooks"] = kept_events
    else:
        merged.pop("hooks", None)
    return merged


def merge_hooks(
    settings: dict[str, Any], hooks: dict[str, Any], harness: str | None = None
) -> dict[str, Any]:
    """``settings`` with ``hooks`` in place of this tool's earlier entries (the user's kept)."""
    merged = remove_own(settings, harness)
    current = dict(merged.get("hooks") or {})
    for event, entries in hooks.items():
        current[event] = [*(current.get(event) or []), *entries]
    merged["hooks"] = current
    return merged


def _read_settings(path: Path) -> dict[str, Any]:
    try:
        current = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    except (OSError, json.JSONDecodeError) as exc:
        raise BadInput(f"cannot read {path}: {exc}", code="bad_settings") from exc
    if not isinstance(current, dict):
        raise BadInput(f"{path} does not hold a JSON object", code="bad_settings")
    return current


def _write_settings(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # Written beside the target and renamed over it, so a crash never leaves half a file.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    if path.exists():
        os.chmod(tmp, path.stat().st_mode & 0o777)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def print_or_install(
    path: Path | None,
    yes: bool,
    *,
    inbox_cmd: str | None = None,
    env: dict[str, str] | None = None,
    confirm: Callable[[str], bool] | None = None,
    uninstall: bool = False,
    harness: str = "claude",
) -> int:
    """Print the hooks settings; with ``path``, install them into that settings file
    (replacing this tool's earlier entries), or with ``uninstall`` remove exactly those.
    ``harness``: ``claude`` (a settings.json) or ``codex`` (a hooks.json).

    A Redis URL with a password is kept out of the file (bus.core.hook_env): installing
    writes it to ``$INBOX_HOME/hooks.env.json`` (0600) instead. Asks before writing
    unless ``yes``; with no terminal to ask on it refuses (:class:`~bus.core.errors.Refused`
    ``needs_yes``). Returns the exit code (1 declined).
    """
    source = dict(os.environ) if env is None else env
    shown, kept = _env.split_env(source)
    if harness == "codex":
        from .hooks_codex import codex_settings

        hooks = codex_settings(inbox_cmd or inbox_program(), shown)
    elif harness == "claude":
        hooks = claude_settings(inbox_cmd or inbox_program(), shown)
    else:
        raise BadInput(f"no ready-made hooks for {harness!r}; there are: claude, codex")
    events = list(hooks)
    if path is None:
        if uninstall:
            raise BadInput("--uninstall needs the settings file: --uninstall PATH")
        if kept:
            sys.stderr.write(
                f"inbox: {', '.join(kept)} carries a password, so it is left out; "
                "--install keeps it for the hooks in "
                f"{_env.env_file(Path(shown['INBOX_HOME']))} (0600)\n"
            )
        sys.stdout.write(json.dumps({"hooks": hooks}, indent=2) + "\n")
        return 0
    path = path.expanduser()
    current = _read_settings(path)
    changed = remove_own(current, harness) if uninstall else merge_hooks(current, hooks, harness)
    if changed == current and (uninstall or not kept):
        what = "has no inbox hooks" if uninstall else "already has these inbox hooks"
        sys.stdout.write(f"{path} {what}\n")
        return 0
    if not yes:
        verb = (
            "Remove the inbox hooks from"
            if uninstall
            else f"Write the inbox hooks ({', '.join(events)}) into"
        )
        if confirm is None and not sys.stdin.isatty():
            raise Refused(
                f"no terminal to ask on; to change {path}, run again with --yes",
                code="needs_yes",
            )
        if not (confirm or _ask)(f"{verb} {path}?"):
            sys.stderr.write("inbox: not changed\n")
            return 1
    if not uninstall and kept:
        where = _env.write_env_file(Path(shown["INBOX_HOME"]), kept)
        sys.stdout.write(f"kept {', '.join(kept)} (it has a password) in {where}, mode 0600\n")
    if changed != current:
        _write_settings(path, changed)
    done = "removed the inbox hooks from" if uninstall else "wrote the inbox hooks into"
    sys.stdout.write(f"{done} {path}\n")
    return 0


def _ask(question: str) -> bool:
    try:
        return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")
    except EOFError:
        return False


__all__ = ["merge_hooks", "print_or_install", "remove_own"]
