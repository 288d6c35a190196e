"""Ready-made Claude Code hooks: the harness contract as hook commands.

``inbox hooks claude`` prints the ``"hooks"`` settings block (``--install PATH`` writes it
into a settings.json, ``--uninstall PATH`` takes it out). Each command is the absolute path
of the ``inbox`` that wrote it, with the settings that locate the bus (bus.core.hook_env: never
a password), because Claude Code runs it through ``sh -c`` with the user's own PATH. Claude
Code then runs ``<inbox> hook claude <Event>`` with the event's JSON on stdin:

============== =========================================================================
SessionStart   register the session (host ``INBOX_HOST``, handle ``<host>:<sid[:8]>``
               unless ``INBOX_HANDLE``); what waits on the floor goes into the context;
               after a compaction, resume or clear, so does one line per thread that
               still has unread messages (:func:`unread_text`)
UserPromptSubmit  stop the session's waiter, ``turn start``, then drain the floor
               stamped into the prompt's context
PostToolUse    drain the floor; anything new is injected as ``additionalContext``, which
               is how a mid-turn notice reaches the model at its next tool step
Stop           ``turn end`` with the turn's last assistant message as the answer; and,
               in the background (``asyncRewake``), ``hook claude wait``: the waiter
               that wakes the idle session (bus.surfaces.harness.waiter)
SessionEnd     stop the waiter, ``session close``
============== =========================================================================

A hook must never break the person's session: every failure goes to stderr and the hook
exits 0 (the waiter exits 2 only to hand a notice over). The floor is a local file, so
the drain still works with Redis down.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bus.core import hook_env as _env
from bus.core import notices
from bus.core.errors import BadInput
from bus.core.models import check_session_id
from bus.local import unix_socket

from .waiter import WAIT_TIMEOUT_S, stop_waiter, wait_entry

if TYPE_CHECKING:
    from bus.api import Bus

EVENTS = ("SessionStart", "UserPromptSubmit", "PostToolUse", "Stop", "SessionEnd")
WAIT = "wait"  # the background waiter, run at Stop
# Hooks block the harness while they run; a hung Redis must not hold a turn for minutes.
HOOK_TIMEOUT_S = 15
HOOK_ENV = _env.HOOK_ENV
# What Claude Code shows the model before the waiter's notice, and the person in the
# terminal, when the waiter wakes the session.
REWAKE_MESSAGE = "The agent inbox woke this idle session:"
REWAKE_SUMMARY = "inbox: new messages"
# SessionStart sources after which the model's context no longer holds earlier notices.
FORGETTING = ("compact", "resume", "clear")
# Recognised by the suffix alone, so entries written by an older install (a bare
# "inbox", another venv, --command) are replaced too.
_OWN = re.compile(r"\shook (claude|codex) (" + "|".join((*EVENTS, WAIT)) + r")$")


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
    """The settings a hook command carries: the ones set here that locate the bus, less
    any URL with a password (kept in ``$INBOX_HOME/hooks.env.json`` instead)."""
    return _env.hook_env(env)


def hook_command(
    event: str, inbox_cmd: str = "inbox", env: dict[str, str] | None = None, harness: str = "claude"
) -> str:
    """``[NAME=value ...] <inbox> hook <harness> <event>``, quoted for ``sh -c``."""
    return f"{_env.prefix(env or {})}{inbox_cmd} hook {harness} {event}"


def is_own_command(command: object, harness: str | None = None) -> bool:
    """True for a hook command this tool wrote (any inbox path, any env prefix); for
    ``harness`` only, when given."""
    if not isinstance(command, str):
        return False
    found = _OWN.search(command.strip())
    return found is not None and harness in (None, found.group(1))


def claude_settings(inbox_cmd: str = "inbox", env: dict[str, str] | None = None) -> dict[str, Any]:
    """The ``"hooks"`` object of a Claude Code settings.json that wires up the inbox."""
    hooks: dict[str, Any] = {}
    for event in EVENTS:
        entries: list[dict[str, Any]] = [
            {
                "type": "command",
                "command": hook_command(event, inbox_cmd, env),
                "timeout": HOOK_TIMEOUT_S,
            }
        ]
        if event == "Stop":
            # Runs in the background; its exit 2 wakes the model with its stderr. Claude
            # Code stops it (SIGTERM) at this timeout; the waiter leaves a minute before.
            entries.append(
                {
                    "type": "command",
                    "command": hook_command(WAIT, inbox_cmd, env),
                    "asyncRewake": True,
                    "timeout": WAIT_TIMEOUT_S,
                    "rewakeMessage": REWAKE_MESSAGE,
                    "rewakeSummary": REWAKE_SUMMARY,
                }
            )
        # PostToolUse matches tool names ("*" = every tool); for the others "" matches all.
        matcher = "*" if event == "PostToolUse" else ""
        hooks[event] = [{"matcher": matcher, "hooks": entries}]
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


def unread_text(bus: Bus, sid: str) -> str:
    """One notice over every thread of ``sid`` that still has unread messages (blockers
    first, the notice's cap on lines), for a context that lost the earlier notices."""
    records = [r for r in bus.store.inbox.all_records(sid) if r.get("mark") in ("new", "noticed")]
    if not records:
        return ""
    inputs = [
        {
            **(r.get("m") or {}),
            "thread": r["thread"],
            "class": r.get("class"),
            "key": r.get("key"),
            "from": r.get("from"),
            "ts": r.get("at"),
        }
        for r in records
    ]
    return notices.render_notice(notices.summarize(inputs), sid, word="unread")


def open_text(
    bus: Bus, sid: str, source: object, wake_cmd: str | None = None, *, opened: bool = False
) -> str:
    """Session open (or re-open): register it (unless the caller has, ``opened``) and say
    what waits. After a compaction, resume or clear, the unread threads too; a raw line
    drained then is said as well."""
    if not opened:
        _guarded(
            "session open",
            lambda: bus.open_session(sid, handle=_handle(bus, sid), wake_cmd=wake_cmd),
        )
    parts = [_guarded("socket check", lambda: unreachable_text(bus, sid)) or ""]
    if source not in FORGETTING:
        parts.append(_drained(bus, sid))
    else:
        lines = _guarded("drain", lambda: bus.drain(sid)) or []
        raw = [x for x in lines if isinstance(x, dict) and x.get("kind") != "notice"]
        parts.append(_guarded("unread threads", lambda: unread_text(bus, sid)) or "")
        if raw:
            parts.append(bus.render(raw))
    return "\n\n".join(p.strip() for p in parts if p and p.strip())


def unreachable_text(bus: Bus, sid: str) -> str:
    """What the session is told once, at its start, when its socket can be neither bound
    nor connected to (bus.local.unix_socket): no wake while idle, no message mid-turn."""
    found = unix_socket.problem(bus.floor.socket_path(sid))
    if found is None:
        return ""
    return (
        f"[inbox] This session {unix_socket.EFFECT}: {found['reason']}. Fix: {found['fix']}. "
        "`inbox doctor` says the same."
    )


def start_text(bus: Bus, sid: str, prompt: object = None) -> str:
    """A turn starts: the waiter (if armed) stands down, then what waits is said. A
    notice the prompt already holds (a wake command's turn: its prompt is the notice on
    its stdin) is drained, so it counts as heard, but not said a second time."""
    _guarded("waiter stop", lambda: stop_waiter(bus.floor.session_dir(sid)))
    _guarded("turn start", lambda: bus.turn(sid, "start"))
    if not isinstance(prompt, str) or not prompt.strip():
        return _drained(bus, sid)
    lines = _guarded("drain", lambda: bus.drain(sid))
    left = _not_said(bus, lines, prompt) if isinstance(lines, list) else []
    text = _guarded("render", lambda: bus.render(left)) if left else ""
    return text.strip() if isinstance(text, str) else ""


def _not_said(bus: Bus, lines: list[dict[str, Any]], prompt: str) -> list[dict[str, Any]]:
    """``lines`` but the notices the prompt already holds: one by one, or the first ones
    merged into one notice (a wake's prompt merges the notices waiting on the floor)."""
    said: set[int] = set()
    notice_at = [i for i, x in enumerate(lines) if x.get("kind") == "notice"]
    for n in range(len(notice_at), 1, -1):
        merged = str(bus.render([lines[i] for i in notice_at[:n]]) or "").strip()
        if merged and merged in prompt:
            said.update(notice_at[:n])
            break
    return [x for i, x in enumerate(lines) if i not in said and not _said_in(x, prompt)]


def _said_in(line: dict[str, Any], prompt: str) -> bool:
    text = str(line.get("text") or "").strip()
    return line.get("kind") == "notice" and bool(text) and text in prompt


def end_turn(bus: Bus, sid: str, answer: str | None) -> None:
    _guarded("turn end", lambda: bus.turn(sid, "end", answer=answer))


def end_session(bus: Bus, sid: str) -> None:
    _guarded("waiter stop", lambda: stop_waiter(bus.floor.session_dir(sid)))
    _guarded("session close", lambda: bus.close_session(sid))


def context_json(event: str, text: str) -> str:
    """``text`` as the ``additionalContext`` of ``event``'s answer (what reaches the model)."""
    return json.dumps(
        {"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}},
        ensure_ascii=False,
    )


def run_hook(event: str, payload: dict[str, Any], bus: Bus) -> tuple[int, str]:
    """Run the inbox's part of one Claude Code hook; returns (exit code, stdout text).

    The exit code is 0 (errors are written to stderr instead), except the waiter's 2
    when it hands a notice over on stderr.
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
        out = open_text(bus, sid, payload.get("source"))
    elif event == "UserPromptSubmit":
        out = start_text(bus, sid, payload.get("prompt"))
    elif event == "PostToolUse":
        text = _drained(bus, sid)
        if text:
            # Plain stdout of PostToolUse only reaches the transcript; this form reaches
            # the model.
            out = context_json("PostToolUse", text)
    elif event == "Stop":
        answer = payload.get("last_assistant_message")
        if not isinstance(answer, str) or not answer.strip():
            answer = last_assistant_text(payload.get("transcript_path"))
        end_turn(bus, sid, answer)
    elif event == "SessionEnd":
        end_session(bus, sid)
    elif event == WAIT:
        code = _guarded("wait", lambda: wait_entry(sid, bus))
        return (code if isinstance(code, int) else 0), ""
    else:
        _warn(f"unknown event {event!r}; expected one of {', '.join((*EVENTS, WAIT))}")
    return 0, out


__all__ = [
    "EVENTS",
    "WAIT",
    "claude_settings",
    "context_json",
    "hook_command",
    "inbox_program",
    "is_own_command",
    "run_hook",
    "unread_text",
]
