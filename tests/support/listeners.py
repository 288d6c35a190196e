"""Stand-ins for a harness's side of a session's socket: a handler that records what a
:class:`bus.surfaces.listener.Listener` hands it, and a socket that takes lines and never
acknowledges them."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any


def collect(into: list[Any], key: str | None = None) -> Callable[[dict[str, Any]], bool]:
    """A listener handler that records each line (or one field of it) and accepts it."""

    def on_line(obj: dict[str, Any]) -> bool:
        into.append(obj if key is None else obj[key])
        return True

    return on_line


class SilentListener:
    """A harness socket that takes lines and never acks: the worker waits in its ack."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen(8)
        self.path = path
        self.got_line = threading.Event()
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            conn.settimeout(5)
            try:
                if conn.recv(65536):
                    self.got_line.set()
            except OSError:
                pass

    def close(self) -> None:
        self.sock.close()
        for c in self.conns:
            c.close()
        self.path.unlink(missing_ok=True)
