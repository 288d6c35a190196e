"""Ready-made Claude Code hooks (SPEC section 6): the harness contract as hook commands.

``inbox hooks claude`` prints the ``"hooks"`` settings block (``--install PATH`` merges it
into a settings.json); Claude Code then runs ``inbox hook claude <Event>`` with the event's
JSON on stdin:

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
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .models import check_session_id

if TYPE_CHECKING:
    from .api import Bus

EVENTS = ("SessionStart", "UserPromptSubmit", "PostToolUse", "Stop", "SessionEnd")
# Hooks block the harness while they run; a hung Redis must not hold a turn for minutes.
HOOK_TIMEOUT_S = 15


def hook_command(event: str, inbox_cmd: str = "inbox") -> str:
    return f"{inbox_cmd} hook claude {event}"


def claude_settings(inbox_cmd: str = "inbox") -> dict[str, Any]:
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
                        "command": hook_command(event, inbox_cmd),
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
    except Exception as exc:
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


def merge_hooks(settings: dict[str, Any], hooks: dict[str, Any]) -> dict[str, Any]:
    """``settings`` with ``hooks`` added; an entry whose command is already there is kept once."""
    merged = dict(settings)
    current = dict(merged.get("hooks") or {})
    for event, entries in hooks.items():
        existing = list(current.get(event) or [])
        have = {
            h.get("command")
            for e in existing
            if isinstance(e, dict)
            for h in e.get("hooks") or []
            if isinstance(h, dict)
        }
        for entry in entries:
            if any(h["command"] not in have for h in entry["hooks"]):
                existing.append(entry)
        current[event] = existing
    merged["hooks"] = current
    return merged


def print_or_install(
    path: Path | None,
    yes: bool,
    *,
    inbox_cmd: str = "inbox",
    confirm: Callable[[str], bool] | None = None,
) -> int:
    """Print the hooks settings; with ``path``, merge them into that settings.json.

    Asks before writing unless ``yes``. Returns the exit code (1 declined, 2 bad file).
    """
    hooks = claude_settings(inbox_cmd)
    if path is None:
        sys.stdout.write(json.dumps({"hooks": hooks}, indent=2) + "\n")
        return 0
    path = path.expanduser()
    try:
        current = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    except (OSError, json.JSONDecodeError) as exc:
        sys.stderr.write(f"inbox: cannot read {path}: {exc}\n")
        return 2
    if not isinstance(current, dict):
        sys.stderr.write(f"inbox: {path} does not hold a JSON object\n")
        return 2
    merged = merge_hooks(current, hooks)
    if merged == current:
        sys.stdout.write(f"{path} already has the inbox hooks\n")
        return 0
    if not yes:
        ask = confirm or _ask
        if not ask(f"Add the inbox hooks ({', '.join(EVENTS)}) to {path}?"):
            sys.stderr.write("inbox: not changed\n")
            return 1
    path.parent.mkdir(parents=True, exist_ok=True)
    # Written beside the target and renamed over it, so a crash never leaves half a file.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    if path.exists():
        os.chmod(tmp, path.stat().st_mode & 0o777)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(merged, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)
    sys.stdout.write(f"wrote the inbox hooks into {path}\n")
    return 0


def _ask(question: str) -> bool:
    try:
        return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")
    except EOFError:
        return False


__all__ = ["EVENTS", "claude_settings", "hook_entry", "merge_hooks", "print_or_install", "run_hook"]
