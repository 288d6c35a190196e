"""``inbox doctor``: what on this host keeps a session from being woken or heard.

A session's socket (``$INBOX_HOME/inbox/<sid>/inbox.sock``) is how its idle waiter is woken
and how a listener hears a message mid-turn; one that can be neither bound nor connected
to (:mod:`bus.local.unix_socket`) leaves every delivery on the file floor until the next
turn. Lines a drain could not read and kept aside (``malformed.jsonl``) are listed too
(bus.ops.doctor_floor), and each session that nothing can wake, or whose last wake command
failed (bus.ops.doctor_wake). The doctor checks the sessions named, else every session
folder of this host's floor, and says for each that fails why and what fixes it; and what
it thinks of the store's server (its version against the store's floor and known security
fixes), the one check that asks Redis (one that does not answer is said, not a problem
here).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bus.core.ids import check_session_id, is_session_id
from bus.core.settings import Settings
from bus.local import unix_socket

from .doctor_floor import malformed_problems
from .doctor_wake import wake_problems
from .server_gate import doctor_server


def floor_sessions(home: Path) -> list[str]:
    """The session folders of ``home``'s floor (names that are not session ids are
    not sessions the bus made, and are left out)."""
    try:
        names = sorted(p.name for p in (home / "inbox").iterdir() if p.is_dir())
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [name for name in names if is_session_id(name)]


def doctor_report(
    home: Path, sids: list[str] | None = None, *, settings: Settings | None = None
) -> dict[str, Any]:
    """``{"ok", "home", "checked", "problems"}``: each problem is a session whose socket
    cannot be had (``check`` ``socket``) or whose floor kept unreadable lines aside
    (``malformed``), with its ``reason`` and ``fix``. Ids named are checked first (a bad
    one is refused, nothing made). With ``settings``, also ``server``: the store's server
    against the store's floor and known fixes (bus.ops.server_gate; below the floor is a
    problem)."""
    checked = [check_session_id(sid) for sid in sids] if sids else floor_sessions(home)
    found = unix_socket.session_problems(home, checked)
    problems = [
        {"session": sid, "check": "socket", "effect": unix_socket.EFFECT, **found[sid]}
        for sid in checked
        if sid in found
    ]
    problems += malformed_problems(home, checked)
    problems += wake_problems(home, checked)
    server: dict[str, Any] | None = None
    if settings is not None:
        server, rows = doctor_server(settings)
        problems += rows
        problems += doctor_storage(settings)
    report = {"ok": not problems, "home": str(home), "checked": len(checked), "problems": problems}
    return report if server is None else {**report, "server": server}


def run_doctor(settings: Settings, sids: list[str] | None = None) -> dict[str, Any]:
    """Everything ``inbox doctor`` checks: :func:`doctor_report` of this host's home, the
    wake commands waiting for consent (bus.ops.upgrade.with_wake_consent), and, when no
    session is named, the whole bus (bus.telemetry.problems.bus_problems) and the HTTP
    gateway and MCP servers configured here (bus.ops.doctor_reach: ``surfaces`` lists
    each one asked)."""
    from bus.telemetry.problems import bus_problems

    from .doctor_reach import reach_report
    from .upgrade import with_wake_consent

    report = doctor_report(settings.home, sids, settings=settings)
    report = with_wake_consent(report, settings, sids)
    if not sids:  # the whole bus too: hosts, floors, waiting messages, wakes, surfaces
        report["problems"] += bus_problems(settings)
        report["surfaces"], found = reach_report(settings)
        report["problems"] += found
        report["ok"] = not report["problems"]
    return report


def doctor_storage(settings: Settings) -> list[dict[str, Any]]:
    """A store that refuses writes (disk full, a replica, full memory) or cannot meet
    ``INBOX_DURABILITY`` as problem rows; none when it does or does not answer (``server``
    says that)."""
    from bus.store.connect import open_store
    from bus.store.redis_errors import StoreError, refused
    from bus.telemetry.storage import storage_problems, storage_row

    try:
        store = open_store(settings)
        try:
            return storage_problems(store, settings.durability)
        finally:
            store.r.close()
    except StoreError as exc:  # a server refusing writes may refuse the connect's PING too
        said = refused(exc)
        return [] if said is None else [storage_row(said.fault)]


__all__ = ["doctor_report", "doctor_storage", "floor_sessions", "run_doctor"]
