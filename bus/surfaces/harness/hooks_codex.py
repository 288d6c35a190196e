"""Ready-made Codex hooks: the harness contract as Codex hook commands.

``inbox hooks codex`` prints a Codex ``hooks.json`` (``--install PATH`` writes it, usually
``.codex/hooks.json`` in a project or ``~/.codex/hooks.json``; ``--uninstall PATH`` takes
it out), with the Claude Code installer's guarantees (bus.surfaces.harness.hook_install.print_or_install). Codex
runs ``<inbox> hook codex <Event>`` through ``sh -c`` with the event's JSON on stdin, and
reads a JSON answer on stdout:

============== =========================================================================
SessionStart   register the session; what waits goes into the context as
               ``hookSpecificOutput.additionalContext``; after ``compact`` or ``clear``
               one line per thread that still has unread messages too; after ``resume``
               nothing (the thread's history is back; what waits is said at the first
               prompt, unless that prompt is the notice itself). A wake
               command a person gave the session is kept; an interactive Codex's
               session gets ``codex queue`` as its wake command (bus.surfaces.harness.codex_wake).
UserPromptSubmit  ``turn start``, then the floor drained into the prompt's context
PostToolUse    drain the floor; anything new is the ``additionalContext`` the model reads
               with the tool's result (the mid-turn notice)
Stop           anything on the floor: drained, and the turn goes on with it as its next
               input (``decision: block``), once a turn; else ``turn end`` with
               ``last_assistant_message`` as the answer
SessionEnd     ``session close``, except for a session with a wake command: that one stays
               open (idle) between its runs, for its next wake
============== =========================================================================

Codex has no background hook that can start a turn, so there is no waiter: an idle Codex
session is woken by its wake command, which the bus starts with the notice on stdin and
leaves to run (bus.delivery.wake_cmd): ``codex queue`` for an interactive Codex (the notice
is queued as the thread's next turn, which an idle Codex runs at once), ``codex exec resume
<id> -`` for a headless one, given by a person (``session open --wake-cmd``). Codex runs a
hook only once a person trusted it (``/hooks`` in the TUI, which records the hook's hash in
``config.toml``) or the run passes ``--dangerously-bypass-hook-trust``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from bus.delivery import kept_wake

from . import codex_wake, hooks

if TYPE_CHECKING:
    from bus.api import Bus

EVENTS = ("SessionStart", "UserPromptSubmit", "PostToolUse", "Stop", "SessionEnd")
HARNESS = "codex"
# What Codex shows in its status line while an inbox hook runs.
STATUS = "inbox"
# Codex clamps a SessionEnd hook's timeout to 3 s (and warns at start when it is longer).
SESSION_END_TIMEOUT_S = 3


def codex_settings(inbox_cmd: str = "inbox", env: dict[str, str] | None = None) -> dict[str, Any]:
    """The ``"hooks"`` object of a Codex hooks.json that wires up the inbox.

    No ``matcher``: Codex then runs the group for every tool and every session source."""
    return {
        event: [
            {
                "hooks": [
                    {
                        "type": "command",
                        "command": hooks.hook_command(event, inbox_cmd, env, harness=HARNESS),
                        "timeout": (
                            SESSION_END_TIMEOUT_S if event == "SessionEnd" else hooks.HOOK_TIMEOUT_S
                        ),
                        "statusMessage": STATUS,
                    }
                ]
            }
        ]
        for event in EVENTS
    }


def _kept_wake_cmd(bus: Bus, sid: str) -> str | None:
    """The wake command the session was opened with on this host (a re-open from a hook
    keeps it): the one kept in its folder, never the record's in Redis, which a re-open
    would otherwise make this host's (bus.delivery.kept_wake)."""
    return kept_wake.kept(bus.floor, sid)


def _session_start(bus: Bus, sid: str, payload: dict[str, Any]) -> str:
    """Register the session with its wake (bus.surfaces.harness.codex_wake.plan) and the processes
    it lives as long as; say what waits, and why nothing can wake it if nothing can."""
    kept = hooks._guarded("session", lambda: _kept_wake_cmd(bus, sid))
    cwd = payload.get("cwd") if isinstance(payload.get("cwd"), str) else None
    plan = hooks._guarded("wake command", lambda: codex_wake.plan(sid, kept, cwd))
    if plan is None:
        plan = codex_wake.Plan(None, problem="finding Codex's wake failed (see stderr)")
    if plan.cmd is None and kept and not codex_wake.is_queue_cmd(kept):
        plan = codex_wake.Plan(kept)  # a person's wake command stays whatever went wrong
    problem = plan.problem

    def open_it() -> None:
        # The new holders before the open: the worker's look (bus.delivery.holder_watch)
        # then never judges the re-opened session by the holders of a window that quit.
        kept_wake.keep_holders(bus.floor, sid, plan.holders)
        bus.open_session(
            sid, handle=hooks._handle(bus, sid), wake_cmd=plan.cmd, wake_problem=problem
        )
        kept_wake.note(bus.floor, sid, "wake_problem", problem)

    hooks._guarded("session open", open_it)
    text = ""
    # A resumed thread comes back with its whole history, and a woken run's prompt is its
    # notice: what waits stays on the floor for that prompt's hook, which says it unless
    # the prompt already does.
    if payload.get("source") != "resume":
        text = hooks.open_text(bus, sid, payload.get("source"), opened=True)
    if problem:
        note = f"[inbox] Nothing wakes this session while it is idle: {problem}."
        text = f"{note}\n\n{text}" if text else note
    return text


def _held_at_stop(bus: Bus, sid: str, payload: dict[str, Any]) -> str:
    """What waits on the floor when the turn would end, drained: a notice that came during
    a step with no ``PostToolUse`` after it (Codex hands a long command back to the model,
    which polls it, and runs no hook for that step), said before the turn is over. Once
    a turn: a Stop that a previous one continued (``stop_hook_active``) drains nothing; what
    came since stays for the bus's next wake."""
    if payload.get("stop_hook_active") is True:
        return ""
    lines = hooks._guarded("floor", lambda: bus.floor.peek(sid))
    if not lines:
        return ""
    return hooks._drained(bus, sid)


def run_codex_hook(event: str, payload: dict[str, Any], bus: Bus) -> tuple[int, str]:
    """Run the inbox's part of one Codex hook; returns (0, stdout text): errors go to
    stderr, never into the exit code (a failing hook must not stop the person's turn)."""
    sid = payload.get("session_id")
    try:
        hooks.check_session_id(sid)
    except hooks.BadInput as exc:
        hooks._warn(f"{event}: {exc}; nothing done")
        return 0, ""
    assert isinstance(sid, str)
    text = ""
    if event == "SessionStart":
        text = _session_start(bus, sid, payload)
    elif event == "UserPromptSubmit":
        text = hooks.start_text(bus, sid, payload.get("prompt"))
    elif event == "PostToolUse":
        text = hooks._drained(bus, sid)
    elif event == "Stop":
        held = _held_at_stop(bus, sid, payload)
        if held:
            # The turn goes on with what waits as its next input: never lost with it.
            return 0, json.dumps({"decision": "block", "reason": held}, ensure_ascii=False)
        answer = payload.get("last_assistant_message")
        hooks.end_turn(bus, sid, answer if isinstance(answer, str) and answer.strip() else None)
    elif event == "SessionEnd":
        # A headless session a person gave a wake command (``codex exec resume``) outlives
        # each run: it stays open, idle, for its next wake.
        if codex_wake.closes_at_end(hooks._guarded("session", lambda: _kept_wake_cmd(bus, sid))):
            hooks.end_session(bus, sid)
            hooks._guarded("note", lambda: kept_wake.note(bus.floor, sid, "wake_problem", None))
    else:
        hooks._warn(f"unknown Codex event {event!r}; expected one of {', '.join(EVENTS)}")
    # Codex reads a JSON object on stdout; plain text would be refused as invalid output.
    return 0, hooks.context_json(event, text) if text else ""


__all__ = ["EVENTS", "codex_settings", "run_codex_hook"]
