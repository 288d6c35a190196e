"""Which session a harness's MCP server acts for, as the harness's hooks recorded it.

Claude Code and Codex start an MCP server (``inbox mcp``) once per harness process and
tell it nothing of the session: no id in its environment, arguments or requests. Their
hooks do get the session id (the ``session_id`` of every hook's JSON). Both are children
of the same harness process, so the SessionStart hook records the session under that
process (:func:`record`) and the MCP server looks it up under its own harness process
(:func:`recorded`) at each call: a ``/clear`` or a resume, which starts a new session in
the same process, records the new id and the next call acts as it.

The harness process is the first ancestor that is not a shell or ``env`` (a hook runs
through ``sh -c``; an MCP server may be wrapped the same way), named by its pid and start
time, so a reused pid never finds an old record. Records live in ``$INBOX_HOME/harness/``
(the home is 0700), one file a harness process, written atomically; records of processes
that are gone are removed when a new one is written. Process ancestry comes from psutil.

One harness process can host many sessions at once: Codex's background server (``codex
app-server --managed-daemon``) runs the threads of every window of one ``$CODEX_HOME``,
and starts each thread's MCP server itself, telling it nothing of the thread. Under such
a server each session is recorded on its own too (``<harness>~<sid>``), and an MCP server
acts as the one recorded session whose window is still open (bus.delivery.kept_wake's
holders); when there are several, it acts as none (the caller must set
``INBOX_SESSION``) rather than as another window's session.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import psutil

from bus.core.errors import BusError
from bus.core.models import check_session_id
from bus.local.private_files import private_dirs

from .codex_wake import is_daemon

FOLDER = "harness"
# Between a shared harness's name and a session's in a per-session record.
SEP = "~"
# Wrappers between a harness and what it starts: skipped to find the harness itself.
WRAPPERS = frozenset({"sh", "bash", "dash", "zsh", "fish", "ksh", "mksh", "tcsh", "csh", "env"})


def harness_of(pid: int | None = None) -> str | None:
    """``<pid>-<start ms>`` of the harness process that started ``pid`` (default: this
    process); None when there is none to be found."""
    try:
        proc = psutil.Process(pid or os.getpid()).parent()
        while proc is not None and proc.name() in WRAPPERS:
            proc = proc.parent()
        if proc is None or proc.pid <= 1:
            return None
        return f"{proc.pid}-{round(proc.create_time() * 1000)}"
    except psutil.Error:
        return None


def _alive(name: str) -> bool:
    pid, _, started = name.split(SEP, 1)[0].partition("-")
    try:
        proc = psutil.Process(int(pid))
        return round(proc.create_time() * 1000) == int(started)
    except (ValueError, psutil.Error):
        return False


def record(home: Path, sid: str, pid: int | None = None) -> Path | None:
    """Record ``sid`` as the session of the harness that started ``pid`` (default: this
    process, a hook); the record's path, or None when no harness was found."""
    check_session_id(sid)
    harness = harness_of(pid)
    if harness is None:
        return None
    folder = private_dirs(home / FOLDER)
    for old in folder.iterdir():
        if old.name != harness and not old.name.startswith(".") and not _alive(old.name):
            with contextlib.suppress(OSError):
                old.unlink()
    path = folder / harness
    for target in (path, folder / f"{harness}{SEP}{sid}") if _shared(harness) else (path,):
        tmp = folder / f".{target.name}.{os.getpid()}"
        tmp.write_text(sid)
        os.replace(tmp, target)
    return path


def _shared(harness: str) -> bool:
    """Whether the harness process hosts many sessions (Codex's background server)."""
    try:
        argv = psutil.Process(int(harness.partition("-")[0])).cmdline()
    except (ValueError, psutil.Error):
        return False
    return is_daemon(argv)


def _live_sessions(home: Path, harness: str) -> list[str]:
    from bus.delivery import kept_wake
    from bus.delivery.floor import Floor

    floor = Floor(home)
    found = []
    for rec in sorted((home / FOLDER).glob(f"{harness}{SEP}*")):
        sid = rec.name.split(SEP, 1)[1]
        with contextlib.suppress(BusError, ValueError, OSError):
            if not kept_wake.holders_gone(floor, check_session_id(sid)):
                found.append(sid)
    return found


def recorded(home: Path, pid: int | None = None) -> str | None:
    """The session the hooks recorded for the harness that started ``pid`` (default: this
    process, an MCP server); None when they recorded none (or not a session id)."""
    harness = harness_of(pid)
    if harness is None:
        return None
    if _shared(harness):
        live = _live_sessions(home, harness)
        return live[0] if len(live) == 1 else None
    try:
        sid = (home / FOLDER / harness).read_text().strip()
        return check_session_id(sid)
    except (OSError, ValueError, BusError):
        return None


def forget(home: Path, sid: str, pid: int | None = None) -> None:
    """Remove the harness's record if it still names ``sid`` (its session ended)."""
    harness = harness_of(pid)
    if harness is None:
        return
    path = home / FOLDER / harness
    with contextlib.suppress(OSError):
        (home / FOLDER / f"{harness}{SEP}{sid}").unlink()
    with contextlib.suppress(OSError):
        if path.read_text().strip() == sid:
            path.unlink()
