"""The processes ``inbox up`` runs on this host, as ``inbox status`` shows them.

The supervisor writes one row per process to ``$INBOX_HOME/up.procs.json`` (0600, replaced
whole) whenever one starts or goes: itself, the embedded Redis, the worker and the
scheduler, and each one's spare (``standby``: imported, waiting to take over on a
restart, connected to nothing; bus.ops.standby). A clean stop removes the file. Spares
hold no heartbeat in the store, so this file is where they are seen.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

# Not ``typing.TYPE_CHECKING``: importing typing alone costs the read lane several ms
# (``inbox status`` there reads this file; tests/integration/cli/test_cli_startup.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

FILE = "up.procs.json"


def procs_path(home: Path) -> Path:
    return Path(home) / FILE


def process_rows(
    rows: list[dict[str, Any]],
    alive: Callable[[int], bool],
    children: Callable[[int], list[int]] = lambda _pid: [],
) -> list[dict[str, Any]]:
    """Each recorded row with ``alive``, and a running worker's pool processes
    (``children``, its child pids); none at all when the supervisor (role ``supervisor``)
    is dead: the file outlived an ``inbox up`` that was killed (its children die with it)."""
    supervisor = next((r for r in rows if r.get("role") == "supervisor"), None)
    if supervisor is None or not alive(int(supervisor.get("pid") or 0)):
        return []
    out = []
    for row in rows:
        pid = int(row.get("pid") or 0)
        shown = {**row, "alive": pid > 0 and alive(pid)}
        if shown["alive"] and row.get("role") == "worker" and not row.get("standby"):
            shown["children"] = children(pid)
        out.append(shown)
    return out


def child_pids(pid: int) -> list[int]:
    """``pid``'s child processes, from ``/proc`` (Linux); none where that cannot be read."""
    found: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                found.extend(int(c) for c in f.read().split())
        except OSError:
            continue
    return sorted(found)


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_procs(home: Path) -> list[dict[str, Any]]:
    """This host's ``inbox up`` processes (:func:`process_rows`); none when no ``inbox up``
    runs with this home or its file does not parse."""
    try:
        rows = json.loads(procs_path(home).read_text())
    except (OSError, ValueError):
        return []
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        return []
    return process_rows(rows, pid_alive, child_pids)


def write_procs(home: Path, rows: list[dict[str, Any]]) -> None:
    """Replace the file with ``rows`` (private, whole: a reader never sees half of it)."""
    from .private_files import write_private  # the writer's only: the read lane reads

    write_private(procs_path(home), json.dumps(rows))


def remove_procs(home: Path) -> None:
    procs_path(home).unlink(missing_ok=True)


__all__ = ["child_pids", "process_rows", "procs_path", "read_procs", "remove_procs", "write_procs"]
