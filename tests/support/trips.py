"""A recorder of every command or pipeline this process sends to Redis, and the names of
the store's scripts in it: the round trips a path takes, counted by tests and bench/lone_trips.py."""

from __future__ import annotations

import threading
import time
from typing import Any

import redis.connection

from bus.api import Bus


class Trips:
    """Every command or pipeline this process sends: (perf_counter, thread, names)."""

    def __init__(self) -> None:
        self.real: Any = None
        self.lock = threading.Lock()
        self.sent: list[tuple[float, str, list[str]]] = []

    def record(self, command: Any) -> None:
        chunks = command if isinstance(command, list) else [command]
        parts = b"".join(bytes(c) for c in chunks).split(b"\r\n")
        names = []
        for i, part in enumerate(parts):
            if part.startswith(b"*") and i + 2 < len(parts) and parts[i + 1].startswith(b"$"):
                name = parts[i + 2].upper().decode(errors="replace")
                if name == "EVALSHA" and i + 4 < len(parts):  # the script's sha, named later
                    name += ":" + parts[i + 4].decode(errors="replace")
                names.append(name)
        entry = (time.perf_counter(), threading.current_thread().name, names)
        with self.lock:
            self.sent.append(entry)

    def install(self) -> None:
        real = redis.connection.AbstractConnection.send_packed_command
        trips = self

        def counting(conn: Any, command: Any, check_health: bool = True) -> None:
            trips.record(command)
            real(conn, command, check_health)

        self.real = real
        redis.connection.AbstractConnection.send_packed_command = counting  # type: ignore[method-assign]

    def uninstall(self) -> None:
        redis.connection.AbstractConnection.send_packed_command = self.real  # type: ignore[method-assign]


def between(trips: Trips, start: float, end: float) -> list[tuple[float, str, list[str]]]:
    with trips.lock:
        return [t for t in trips.sent if start <= t[0] < end]


SCRIPTS = {"EVALSHA", "EVAL", "EVALSHA_RO", "EVAL_RO", "FCALL"}


def script_names(commands: list[str], bus: Bus) -> list[str]:
    """``EVALSHA:<sha>`` as ``EVALSHA:<script name>`` (the scripts the store loaded)."""
    names = {script.sha: name for name, script in bus.store._scripts.items()}
    out = []
    for c in commands:
        head, _, sha = c.partition(":")
        out.append(f"{head}:{names.get(sha, sha[:8])}" if sha else c)
    return out
