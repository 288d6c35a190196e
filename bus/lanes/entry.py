"""The ``inbox`` console entry point, small on purpose.

A harness runs ``inbox hook claude PostToolUse`` at every tool step and ``inbox drain SID``
often; nearly always the session's floor is empty. This module answers those two from a
look at the floor with the standard library only; when something waits, bus.lanes.drain
drains it (claim by rename, log, marks recorded, Redis down tolerated, exactly as the
library does) without importing the library. The everyday read commands (``status``,
``threads``, ``read``, ``sent``, ``receipt``, ``read-inbox``) go to bus.lanes.read, which
answers them without the library too, or hands them on. The write commands (``send``,
``reply``, ``withdraw``, ``decide``) go to the warm server of ``inbox up`` (bus.lanes.send)
when one listens. Everything else goes to the full command line (bus.surfaces.cli.app).

"Empty" means: no ``messages.jsonl`` with bytes in it, no claim (``messages.draining.*``,
a drainer's or a dead drainer's) and no marks deferred while Redis was down.
"""

from __future__ import annotations

import io
import os
import sys

# The names shared with the library, from a module of bus that imports only os. Not
# even json or re here: on a busy machine their imports (enum, functools, collections)
# cost more than the rest of the fast path.
from bus.core.lane_names import (
    DRAINING_PREFIX,
    FLOOR,
    MESSAGES,
    PENDING_MARKS,
    READ_COMMANDS,
    SEEN,
    WRITE_COMMANDS,
    home_dir,
    is_session_id,
)

_KEY = '"session_id"'
# The harness was seen: an empty look at the floor tells Redis (the session's last_seen,
# which receipts and handle staleness read) at most once a minute, marked by the mtime of
# $INBOX_HOME/seen/<sid>.
SEEN_EVERY_S = 60.0


def seen_marker(sid: str) -> str:
    return os.path.join(home_dir(), SEEN, sid)


def _session_dir(sid: object) -> str | None:
    if not is_session_id(sid):
        return None
    assert isinstance(sid, str)
    return os.path.join(home_dir(), FLOOR, sid)


def session_id_of(raw: str) -> object:
    """The ``session_id`` of a hook's JSON payload. Read straight from the text when the
    key occurs once with a plain string value (Claude Code's payloads); else by json."""
    at = raw.find(_KEY)
    if at >= 0 and raw.find(_KEY, at + 1) < 0:
        rest = raw[at + len(_KEY) :].lstrip()
        if rest.startswith(":"):
            rest = rest[1:].lstrip()
            end = rest.find('"', 1)
            if rest.startswith('"') and end > 0 and "\\" not in rest[1:end]:
                return rest[1:end]
    import json

    try:
        payload = json.loads(raw)
    except ValueError:
        return None
    return payload.get("session_id") if isinstance(payload, dict) else None


def floor_is_empty(session_dir: str) -> bool | None:
    """True when nothing waits in ``session_dir``; None when there is no such directory."""
    try:
        entries = os.scandir(session_dir)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError:
        return False  # let the full path say what is wrong
    with entries:
        for entry in entries:
            name = entry.name
            if name == MESSAGES:
                try:
                    if entry.stat().st_size > 0:
                        return False
                except FileNotFoundError:
                    continue  # claimed just now: the drainer has it
            elif name.startswith(DRAINING_PREFIX) or name == PENDING_MARKS:
                return False
    return True


def seen_due(sid: str) -> bool:
    """True when this session's last_seen was last told to Redis over a minute ago."""
    import time

    try:
        return time.time() - os.stat(seen_marker(sid)).st_mtime > SEEN_EVERY_S
    except OSError:
        return True


def _empty(sid: str) -> int:
    """Nothing waits: tell Redis the harness was seen, at most once a minute."""
    if seen_due(sid):
        from bus.lanes.drain import touch_seen

        touch_seen(sid)
    return 0


def _hook_post_tool_use() -> int:
    raw = sys.stdin.read()
    sid = session_id_of(raw)
    d = _session_dir(sid)
    # No directory: this host never opened the session, so nothing can wait for it.
    if d is not None and floor_is_empty(d) is not False:
        return _empty(str(sid))
    if d is None:  # not a session id: the full hook says so on stderr
        from bus.surfaces.harness.hook_run import hook_entry

        return hook_entry("PostToolUse", stdin=io.StringIO(raw))
    from bus.lanes.drain import post_tool_use

    return post_tool_use(str(sid))


def _fast_drain(argv: list[str]) -> int | None:
    """``drain SID [--stamped]``: answered here on an empty floor, by bus.lanes.drain when
    something waits; None for the full command (a bad id, an unknown session)."""
    if len(argv) not in (2, 3) or argv[0] != "drain":
        return None
    stamped = argv[2:] == ["--stamped"]
    if len(argv) == 3 and not stamped:
        return None
    d = _session_dir(argv[1])
    empty = None if d is None else floor_is_empty(d)
    if empty is None:
        return None
    if not empty:
        from bus.lanes.drain import drain_command

        return drain_command(argv[1], stamped)
    if not stamped:
        sys.stdout.write("[]\n")
    return _empty(argv[1])


def main() -> None:
    """``inbox``: the two hot commands answered here when there is nothing to do, the
    read commands by bus.lanes.read and the write commands by the warm server when they can;
    the rest by the full command line."""
    argv = sys.argv[1:]
    if argv == ["hook", "claude", "PostToolUse"]:
        sys.exit(_hook_post_tool_use())
    code = _fast_drain(argv)
    if code is None and argv and argv[0] in READ_COMMANDS:
        from bus.lanes.read import answer

        code = answer(argv)
    elif code is None and argv and argv[0] in WRITE_COMMANDS:
        from bus.lanes.send import run

        code = run(argv, home_dir())
    if code is not None:
        sys.exit(code)
    from bus.surfaces.cli.app import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
