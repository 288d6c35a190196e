"""A recorder of every command or pipeline this process sends to Redis, and the names of
the store's scripts in it: the round trips a path takes, counted by tests and bench/lone_trips.py."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import redis.connection

from bus.api import Bus


def command_names(command: Any) -> list[tuple[str, str]]:
    """The commands in one packed send (one command or a pipeline): each one's name, upper
    case, and its first argument as sent ("" when it has none)."""
    chunks = command if isinstance(command, list) else [command]
    # RESP: each command is an array whose first bulk string is its name.
    parts = b"".join(bytes(c) for c in chunks).split(b"\r\n")
    out = []
    for i, part in enumerate(parts):
        if part.startswith(b"*") and i + 2 < len(parts) and parts[i + 1].startswith(b"$"):
            name = parts[i + 2].upper().decode(errors="replace")
            arg = parts[i + 4].decode(errors="replace") if i + 4 < len(parts) else ""
            out.append((name, arg))
    return out


class Trips:
    """Every command or pipeline this process sends: (perf_counter, thread, names)."""

    def __init__(self) -> None:
        self.real: Any = None
        self.lock = threading.Lock()
        self.sent: list[tuple[float, str, list[str]]] = []

    def record(self, command: Any) -> None:
        names = [
            f"{name}:{arg}" if name == "EVALSHA" and arg else name  # the script's sha, named later
            for name, arg in command_names(command)
        ]
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


class RoundTrips:
    """Round trips this process sends to Redis (one per command or pipeline), and the
    names of the commands in them (``SCRIPT`` with its sub-command)."""

    def __init__(self) -> None:
        self.count = 0
        self.commands: list[str] = []
        self.rounds: list[list[str]] = []  # the commands of each round trip, in order

    def sent(self, command: Any) -> None:
        self.count += 1
        names = [
            f"{name} {arg.upper()}" if name == "SCRIPT" and arg else name
            for name, arg in command_names(command)
        ]
        self.commands += names
        self.rounds.append(names)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Count every send of this process until the test ends."""
        real = redis.connection.AbstractConnection.send_packed_command

        def counting(conn: Any, command: Any, check_health: bool = True) -> None:
            self.sent(command)
            real(conn, command, check_health)

        monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counting)


def standalone(b: Bus) -> Bus:
    """``b``, or the test skipped on a cluster store (a cluster splits the round trips)."""
    if b.store.cluster:
        pytest.skip("counts round trips of a standalone server (a cluster splits them)")
    return b
