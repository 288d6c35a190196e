"""``inbox hook HARNESS EVENT``: the entry point every harness hook calls. It reads the
hook's JSON on stdin, finds the bus, runs the harness's own hook (bus.surfaces.harness.hooks for
Claude Code, bus.surfaces.harness.hooks_codex for Codex) and prints what it answers.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from bus.core import hook_env as _env

from .hooks import _guarded, _warn, run_hook

if TYPE_CHECKING:
    from bus.api import Bus


def read_payload(event: str, stdin: Any = None) -> dict[str, Any] | None:
    """The hook's JSON object on stdin; None (said on stderr) when it is not one."""
    raw = (stdin or sys.stdin).read()
    try:
        payload = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as exc:
        _warn(f"{event}: stdin is not JSON ({exc}); nothing done")
        return None
    if not isinstance(payload, dict):
        _warn(f"{event}: stdin is not a JSON object; nothing done")
        return None
    return payload


def connect_for_hook() -> Bus | None:
    """The bus as a hook finds it: the environment, and the URLs kept for hooks."""
    from bus.api import connect

    _guarded("settings", _env.load_hook_env)
    bus = _guarded("connect", connect)
    return bus if bus is not None else None


def hook_entry(
    event: str, stdin: Any = None, bus: Bus | None = None, harness: str = "claude"
) -> int:
    """``inbox hook HARNESS EVENT``: read the hook's JSON on stdin, run it, print its output."""
    payload = read_payload(event, stdin)
    if payload is None:
        return 0
    if bus is None:
        bus = connect_for_hook()
        if bus is None:
            return 0
    if harness == "codex":
        from .hooks_codex import run_codex_hook

        code, out = run_codex_hook(event, payload, bus)
    else:
        code, out = run_hook(event, payload, bus)
    _link(event, payload.get("session_id"), bus)
    if out:
        sys.stdout.write(out + "\n")
        sys.stdout.flush()
    return code


def _link(event: str, sid: object, bus: Bus) -> None:
    """At a session's start, record it as the session of the harness process that runs
    this hook, for the MCP server that harness started (bus.surfaces.harness.link); at
    its end, remove that record."""
    from bus.core.errors import BadInput
    from bus.core.models import check_session_id

    from . import link as harness_link

    if event not in ("SessionStart", "SessionEnd"):
        return
    try:
        sid = check_session_id(sid)
    except BadInput:
        return  # a bad id was said on stderr by the hook itself

    home = bus.settings.home
    if event == "SessionStart":
        _guarded("MCP session link", lambda: harness_link.record(home, sid))
    else:
        _guarded("MCP session link", lambda: harness_link.forget(home, sid))


__all__ = ["connect_for_hook", "hook_entry", "read_payload"]
