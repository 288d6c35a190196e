"""Ready-made Claude Code hooks: the harness contract as hook commands.

``inbox hooks claude`` prints the ``"hooks"`` settings block (``--install PATH`` writes it
into a settings.json, ``--uninstall PATH`` takes it out). Each command is the absolute path
of the ``inbox`` that wrote it, with the settings that locate the bus (``INBOX_HOME``,
``INBOX_REDIS_URL``, ...), because Claude Code runs it through ``sh -c`` with the user's own
PATH. Claude Code then runs ``<inbox> hook claude <Event>`` with the event's JSON on stdin:

============== =========================================================================
SessionStart   register the session (host ``INBOX_HOST``, handle ``<host>:<sid[:8]>``
               unless ``INBOX_HANDLE``); what waits on the floor goes into the context
UserPromptSubmit  ``turn start``, then drain the floor stamped into the prompt's context
PostToolUse    drain the floor; anything new is injected as ``additionalContext``, which
               is how a mid-turn notice reaches the model at its next tool step
Stop           ``turn end`` (the payload carries no answer text, so none is passed)
SessionEnd     ``session close``
============== =========================================================================

A hook must never break the person's session: every failure goes to stderr and the hook
exits 0. The floor is a local file, so the drain still works with Redis down.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import BadInput, Refused
from .models import check_session_id

if TYPE_CHECKING:
    from .api import Bus

EVENTS = ("SessionStart", "UserPromptSubmit", "PostToolUse", "Stop", "SessionEnd")
# Hooks block the harness while they run; a hung Redis must not hold a turn for minutes.
HOOK_TIMEOUT_S = 15
# What a hook needs to find the same bus from the bare environment Claude Code gives it.
# Secrets (INBOX_SECRET, INBOX_TOKEN) are never written into a settings file.
HOOK_ENV = ("INBOX_HOME", "INBOX_REDIS_URL", "INBOX_BROKER_URL", "INBOX_HOST", "INBOX_KEY_PREFIX")
# Recognised by the suffix alone, so entries written by an older install (a bare
# "inbox", another venv, --command) are replaced too.
_OWN = re.compile(r"\shook claude (" + "|".join(EVENTS) + r")$")


def inbox_program(argv0: str | None = None) -> str:
    """The absolute path of the ``inbox`` being run, shell-quoted (``python -m bus`` when
    it was not started through its script)."""
    path = Path(argv0 if argv0 is not None else sys.argv[0])
    if path.name == "inbox" and path.exists():
        return shlex.quote(str(path.absolute()))
    beside = Path(sys.executable).parent / "inbox"
    if beside.exists():
        return shlex.quote(str(beside.absolute()))
    return f"{shlex.quote(sys.executable)} -m bus"


def hook_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The settings a hook command carries: the ones set here that locate the bus."""
    env = dict(os.environ) if env is None else env
    out = {name: env[name] for name in HOOK_ENV if env.get(name)}
    home = env.get("INBOX_HOME") or env.get("SLAB_HOME")
    if home:  # absolute: the hook runs in the project's folder, not this one
        out["INBOX_HOME"] = str(Path(home).expanduser().absolute())
    return out


def hook_command(event: str, inbox_cmd: str = "inbox", env: dict[str, str] | None = None) -> str:
    """``[NAME=value ...] <inbox> hook claude <event>``, quoted for ``sh -c``."""
    assigns = [f"{k}={shlex.quote(v)}" for k, v in (env or {}).items()]
    return " ".join([*assigns, inbox_cmd, "hook", "claude", event])


def is_own_command(command: object) -> bool:
    """True for a hook command this tool wrote (any inbox path, any env prefix)."""
    return isinstance(command, str) and _OWN.search(command.strip()) is not None


def claude_settings(inbox_cmd: str = "inbox", env: dict[str, str] | None = None) -> dict[str, Any]:
    """The ``"hooks"`` object of a Claude Code settings.json that wires up the inbox."""
    hooks: dict[str, Any] = {}
    for event in EVENTS:
        # PostToolUse matches tool names ("*" = every tool); for the others "" matches all.
        matcher = "*" if event == "PostToolUse" else ""
        hooks[event] = [
            {
                "matcher": matcher,
                "hooks": [
                    {
                        "type": "command",
                        "command": hook_command(event, inbox_cmd, env),
                        "timeout": HOOK_TIMEOUT_S,
                    }
                ],
            }
        ]
    return hooks


# -- running one hook ----------------------------------------------------------------------


def _warn(message: str) -> None:
    sys.stderr.write(f"inbox hook: {message}\n")


def _guarded(what: str, fn: Callable[[], Any]) -> Any:
    """Run one step; a failure is reported on stderr and never ends the hook."""
    try:
        return fn()
    except Exception as exc:  # a hook must not fail the user's session, whatever broke
        _warn(f"{what} failed: {type(exc).__name__}: {exc}")
        return None


def _drained(bus: Bus, sid: str) -> str:
    text = _guarded("drain", lambda: bus.drain(sid, stamped=True))
    return text.strip() if isinstance(text, str) else ""


def _handle(bus: Bus, sid: str) -> str:
    return os.environ.get("INBOX_HANDLE") or f"{bus.settings.host}:{sid[:8]}"


def last_assistant_text(transcript_path: object, limit: int = 8000) -> str | None:
    """The turn's answer for waiting senders: the text of the last assistant message in
    Claude Code's transcript (JSONL), or None when there is none to read."""
    if not isinstance(transcript_path, str) or not transcript_path:
        return None
    try:
        lines = Path(transcript_path).read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a torn last line while Claude Code is still writing
        if not isinstance(entry, dict) or entry.get("type") != "assistant":
            continue
        content = (entry.get("message") or {}).get("content")
        if isinstance(content, str):
            texts = [content]
        elif isinstance(content, list):
            texts = [
                b.get("text", "")
                for b in content
                if isinstance(b, dict) and b.get("type") == "text"
            ]
        else:
            texts = []
        text = "\n".join(t for t in texts if t).strip()
        if text:
            return text[:limit]
    return None


def run_hook(event: str, payload: dict[str, Any], bus: Bus) -> tuple[int, str]:
    """Run the inbox's part of one Claude Code hook; returns (exit code, stdout text).

    The exit code is always 0: errors are written to stderr instead.
    """
    sid = payload.get("session_id") if isinstance(payload, dict) else None
    try:
        check_session_id(sid)
    except BadInput as exc:  # the one error an id check raises
        _warn(f"{event}: {exc}; nothing done")
        return 0, ""
    assert isinstance(sid, str)
    out = ""
    if event == "SessionStart":
        _guarded("session open", lambda: bus.open_session(sid, handle=_handle(bus, sid)))
        out = _drained(bus, sid)
    elif event == "UserPromptSubmit":
        _guarded("turn start", lambda: bus.turn(sid, "start"))
        out = _drained(bus, sid)
    elif event == "PostToolUse":
        text = _drained(bus, sid)
        if text:
            # Plain stdout of PostToolUse only reaches the transcript; this form reaches
            # the model.
            out = json.dumps(
                {"hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": text}},
                ensure_ascii=False,
            )
    elif event == "Stop":
        answer = last_assistant_text(payload.get("transcript_path"))
        _guarded("turn end", lambda: bus.turn(sid, "end", answer=answer))
    elif event == "SessionEnd":
        _guarded("session close", lambda: bus.close_session(sid))
    else:
        _warn(f"unknown event {event!r}; expected one of {', '.join(EVENTS)}")
    return 0, out


def hook_entry(event: str, stdin: Any = None, bus: Bus | None = None) -> int:
    """``inbox hook claude EVENT``: read the hook's JSON on stdin, run it, print its output."""
    raw = (stdin or sys.stdin).read()
    try:
        payload = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as exc:
        _warn(f"{event}: stdin is not JSON ({exc}); nothing done")
        return 0
    if not isinstance(payload, dict):
        _warn(f"{event}: stdin is not a JSON object; nothing done")
        return 0
    if bus is None:
        from .api import connect

        bus = _guarded("connect", connect)
        if bus is None:
            return 0
    code, out = run_hook(event, payload, bus)
    if out:
        sys.stdout.write(out + "\n")
        sys.stdout.flush()
    return code


# -- installing the settings ---------------------------------------------------------------


def remove_own(settings: dict[str, Any]) -> dict[str, Any]:
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
                h for h in inner if not (isinstance(h, dict) and is_own_command(h.get("command")))
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


def merge_hooks(settings: dict[str, Any], hooks: dict[str, Any]) -> dict[str, Any]:
    """``settings`` with ``hooks`` in place of this tool's earlier entries (the user's kept)."""
    merged = remove_own(settings)
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
) -> int:
    """Print the hooks settings; with ``path``, install them into that settings.json
    (replacing this tool's earlier entries), or with ``uninstall`` remove exactly those.

    Asks before writing unless ``yes``; with no terminal to ask on it refuses
    (:class:`~bus.errors.Refused` ``needs_yes``). Returns the exit code (1 declined).
    """
    hooks = claude_settings(inbox_cmd or inbox_program(), hook_env() if env is None else env)
    if path is None:
        if uninstall:
            raise BadInput("--uninstall needs the settings file: --uninstall PATH")
        sys.stdout.write(json.dumps({"hooks": hooks}, indent=2) + "\n")
        return 0
    path = path.expanduser()
    current = _read_settings(path)
    changed = remove_own(current) if uninstall else merge_hooks(current, hooks)
    if changed == current:
        what = "has no inbox hooks" if uninstall else "already has these inbox hooks"
        sys.stdout.write(f"{path} {what}\n")
        return 0
    if not yes:
        verb = (
            "Remove the inbox hooks from"
            if uninstall
            else f"Write the inbox hooks ({', '.join(EVENTS)}) into"
        )
        if confirm is None and not sys.stdin.isatty():
            raise Refused(
                f"no terminal to ask on; to change {path}, run again with --yes",
                code="needs_yes",
            )
        if not (confirm or _ask)(f"{verb} {path}?"):
            sys.stderr.write("inbox: not changed\n")
            return 1
    _write_settings(path, changed)
    done = "removed the inbox hooks from" if uninstall else "wrote the inbox hooks into"
    sys.stdout.write(f"{done} {path}\n")
    return 0


def _ask(question: str) -> bool:
    try:
        return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")
    except EOFError:
        return False


__all__ = [
    "EVENTS",
    "claude_settings",
    "hook_command",
    "hook_entry",
    "inbox_program",
    "is_own_command",
    "merge_hooks",
    "print_or_install",
    "remove_own",
    "run_hook",
]
