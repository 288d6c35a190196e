"""A minimal Redis client for the fast lanes: a Lua script from the drain's
(bus.lanes.writes), a pipeline of reads from the read commands' (bus.lanes.lite_store).

redis-py 8 costs a hook run most of its time just to import (it pulls in asyncio and its
observability modules); the drain after a tool step needs one EVALSHA, a read command a few
round trips of plain reads. This speaks RESP2
over TCP or a unix socket for ``redis://`` and ``unix://`` URLs (password, user, db);
anything else (TLS, a cluster) answers :data:`UNSUPPORTED`, and the caller uses redis-py.
"""

from __future__ import annotations

import hashlib
import socket
from urllib.parse import parse_qs, unquote, urlsplit

# Not ``typing.TYPE_CHECKING``: importing typing alone costs the read lane several ms
# (bus.lanes.read imports this module).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

UNSUPPORTED = object()
TIMEOUT_S = 5.0  # redis-py's default; a hook must not hang on a stuck server


class RespError(Exception):
    """The server answered an error (``-ERR ...``, ``-NOSCRIPT ...``)."""


class Connection:
    """One connection; :meth:`call` sends a command and reads its reply."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.file = sock.makefile("rb")
        # How a reply's bytes become text: "replace" (the drain's marks, ids only), or
        # "strict" (the read lane: text that is not UTF-8 raises, as redis-py's does).
        self.errors = "replace"

    def close(self) -> None:
        self.file.close()
        self.sock.close()

    def call(self, *args: str | int | bytes) -> Any:
        self.sock.sendall(_command(args))
        return self._reply()

    def pipeline(self, commands: list[tuple[str | int | bytes, ...]]) -> list[Any]:
        """Send ``commands`` in one write and read their replies, in order (one round
        trip). An error reply raises :class:`RespError` once every reply is read."""
        if not commands:
            return []
        self.sock.sendall(b"".join(_command(c) for c in commands))
        out: list[Any] = []
        failed: RespError | None = None
        for _ in commands:
            try:
                out.append(self._reply())
            except RespError as exc:
                failed = failed or exc
                out.append(None)
        if failed is not None:
            raise failed
        return out

    def _reply(self) -> Any:
        line = self.file.readline()
        if not line.endswith(b"\r\n"):
            raise ConnectionError("Redis closed the connection")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RespError(rest.decode(errors="replace"))
        if kind == b":":
            return int(rest)
        if kind == b"$":
            size = int(rest)
            if size < 0:
                return None
            data = self.file.read(size + 2)
            if len(data) != size + 2:
                raise ConnectionError("Redis closed the connection")
            return data[:-2].decode(errors=self.errors)
        if kind == b"*":
            count = int(rest)
            return None if count < 0 else [self._reply() for _ in range(count)]
        raise ConnectionError(f"unexpected reply from Redis: {line[:40]!r}")


def _command(args: tuple[str | int | bytes, ...]) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def connect(url: str, timeout: float = TIMEOUT_S) -> Connection | object:
    """A connection for ``url``, authenticated and on its db; :data:`UNSUPPORTED` for a
    URL this client does not speak. Raises OSError when the server does not answer."""
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    if "," in parts.netloc:  # a cluster's several nodes (bus.store.cluster.split_nodes)
        return UNSUPPORTED
    if parts.scheme == "unix":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        address: Any = unquote(parts.path)
        db = query.get("db", ["0"])[0]
    elif parts.scheme == "redis":
        sock = socket.socket(socket.AF_INET6 if ":" in (parts.hostname or "") else socket.AF_INET)
        address = (parts.hostname or "localhost", parts.port or 6379)
        db = (parts.path or "/").lstrip("/") or query.get("db", ["0"])[0]
    else:
        return UNSUPPORTED
    sock.settimeout(timeout)
    try:
        sock.connect(address)
        conn = Connection(sock)
        if parts.password is not None:
            password = unquote(parts.password)
            if parts.username:
                conn.call("AUTH", unquote(parts.username), password)
            else:
                conn.call("AUTH", password)
        if db not in ("", "0"):
            conn.call("SELECT", db)
    except BaseException:
        sock.close()
        raise
    return conn


def run_script(conn: Connection, text: str, keys: list[str], args: list[str | int]) -> Any:
    """EVALSHA the script, loading it with EVAL the first time the server sees it."""
    sha = hashlib.sha1(text.encode()).hexdigest()  # Redis names scripts by their SHA-1
    try:
        return conn.call("EVALSHA", sha, len(keys), *keys, *args)
    except RespError as exc:
        if not str(exc).startswith("NOSCRIPT"):
            raise
    return conn.call("EVAL", text, len(keys), *keys, *args)


__all__ = ["UNSUPPORTED", "Connection", "RespError", "connect", "run_script"]
