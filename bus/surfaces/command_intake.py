"""How a worker of the command server (bus.surfaces.command_server) takes its clients'
requests: steps 1 to 3 of its exchange (the header with the three descriptors, ``+`` or
``full``, the client's ``g``), for every connection at once, waiting on none.

A worker keeps the connections it accepted whose request is not complete, reads each as
its bytes arrive (one ``select`` over them and the listening socket), and hands over the
first whose client said go. A connection gets :data:`TAKE_S` for its header and again
for its ``g`` after the ``+``; one that is still short then is closed, and its
descriptors with it. So an idle or stuck client holds no worker: another's request is
read as soon as it arrives, whatever the idle ones do (a command that runs holds its
worker, as before). A connection from another user is closed unread (``SO_PEERCRED``).
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import time
from collections.abc import Callable

TAKE_S = 1.0  # seconds a client has for its header, and again for its go-ahead
MAX_PENDING = 32  # connections a worker reads at once; more wait in the listen queue
_LENGTH = 10  # the header's length prefix: ten ASCII digits


class _Drop(Exception):
    """The connection is closed: its client went away, or sent what it may not."""


class Pending:
    """A connection whose request is being read: its bytes, descriptors and deadline."""

    def __init__(self, conn: socket.socket, deadline: float) -> None:
        self.conn, self.deadline = conn, deadline
        self.data = bytearray()
        self.fds: list[int] = []
        self.size: int | None = None
        self.request: object | None = None  # parsed and answered "+": waiting for "g"

    def close(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds = []
        self.conn.close()


class Intake:
    """The requests of one worker's clients (see the module's docstring).

    ``owner(conn)`` says whether a connection's peer is this user; ``accept(data, fds)``
    parses a whole header and returns the request, or None to answer ``full`` (another
    install, a command this server does not run); ``max_header`` bounds a header."""

    def __init__(
        self,
        srv: socket.socket,
        *,
        owner: Callable[[socket.socket], bool],
        accept: Callable[[bytes, list[int]], object | None],
        max_header: int,
        take_s: float = TAKE_S,
    ) -> None:
        srv.setblocking(False)  # workers share it: the one that accepts first takes it
        self.srv, self.owner, self.accept, self.max_header = srv, owner, accept, max_header
        self.take_s = take_s
        self.pending: dict[socket.socket, Pending] = {}

    def next(self) -> tuple[socket.socket, object, list[int]]:
        """The next connection whose client said go (blocking until one does), with its
        request and its three descriptors; the connection is blocking again."""
        while True:
            now = time.monotonic()
            for p in [p for p in self.pending.values() if p.deadline <= now]:
                # One last read: a request that arrived while this worker ran a command
                # is not dropped for the worker's lateness.
                if self._advance(p):
                    return self._take(p)
                if p.conn in self.pending:
                    self._drop(p)
            waits = [self.srv] if len(self.pending) < MAX_PENDING else []
            waits += list(self.pending)
            timeout = (
                max(0.0, min(p.deadline for p in self.pending.values()) - now)
                if self.pending
                else None
            )
            ready, _, _ = select.select(waits, [], [], timeout)
            for s in ready:
                if s is self.srv:
                    self._accept()
                    continue
                found = self.pending.get(s)
                if found is not None and self._advance(found):
                    return self._take(found)

    def finish(self) -> list[tuple[socket.socket, object, list[int]]]:
        """On the worker's leaving: the connections already answered ``+`` whose go
        arrives within their bound, to be run (their clients no longer run them
        themselves); every other is closed, and its client runs its command itself."""
        left = []
        for p in list(self.pending.values()):
            if p.request is not None:
                try:
                    p.conn.settimeout(max(0.0, p.deadline - time.monotonic()))
                    if p.conn.recv(1) == b"g":
                        left.append(self._take(p))
                        continue
                except OSError:
                    pass
            self._drop(p)
        return left

    def _accept(self) -> None:
        try:
            conn, _addr = self.srv.accept()
        except (BlockingIOError, InterruptedError):
            return  # another worker took it
        if not self.owner(conn):
            conn.close()
            return
        conn.setblocking(False)
        self.pending[conn] = Pending(conn, time.monotonic() + self.take_s)

    def _take(self, p: Pending) -> tuple[socket.socket, object, list[int]]:
        del self.pending[p.conn]
        p.conn.setblocking(True)
        return p.conn, p.request, p.fds

    def _drop(self, p: Pending) -> None:
        self.pending.pop(p.conn, None)
        p.close()

    def _advance(self, p: Pending) -> bool:
        """Read what ``p``'s client sent; True once it said go. A connection that must
        end is dropped here (a ``full`` sent first when its header was whole)."""
        try:
            return self._read(p)
        except (_Drop, OSError):
            self._drop(p)
            return False

    def _read(self, p: Pending) -> bool:
        if p.request is not None:
            try:
                go = p.conn.recv(1)
            except BlockingIOError:
                return False
            if go != b"g":
                raise _Drop  # it gave up waiting for the "+": it runs the command itself
            return True
        while True:
            try:
                msg, fds, _flags, _addr = socket.recv_fds(p.conn, 65536, 3)
            except BlockingIOError:
                return False
            p.fds += fds
            if not msg or len(p.fds) > 3:
                raise _Drop
            p.data += msg
            if p.size is None and len(p.data) >= _LENGTH:
                if not p.data[:_LENGTH].isdigit() or int(p.data[:_LENGTH]) > self.max_header:
                    raise _Drop
                p.size = int(p.data[:_LENGTH])
            if p.size is not None and len(p.data) >= _LENGTH + p.size:
                break
        assert p.size is not None
        if len(p.data) > _LENGTH + p.size:
            raise _Drop  # bytes before the "+": not a client of this exchange
        request = self.accept(bytes(p.data[_LENGTH:]), p.fds)
        if request is None:
            with contextlib.suppress(OSError):
                p.conn.send(b"full")
            raise _Drop
        p.conn.send(b"+")
        p.request, p.deadline = request, time.monotonic() + self.take_s
        return False


__all__ = ["MAX_PENDING", "TAKE_S", "Intake", "Pending"]
