"""A reference listener on a session's ``inbox.sock`` (``inbox listen``).

Harness authors copy this. The protocol is prox's: a sender connects, writes one JSON
line and ``\\n``, and waits up to 1 s for a one-line ack. Only ``{"ok": true}`` counts as
delivered; anything else (or silence) makes the sender put the line on the file floor,
so a listener that cannot take a line should say ``{"ok": false}`` quickly.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

from bus.core.errors import BadInput, BusError, Refused
from bus.delivery.floor import SOCKET, Floor
from bus.delivery.floor_lines import HEARD, line_key, record_heard
from bus.delivery.said import SAID, SaidCache, record_said, unsaid
from bus.local import unix_socket

ACK_OK = b'{"ok": true}\n'
ACK_NO = b'{"ok": false}\n'
MAX_LINE = 1 << 20  # well above 8000 characters of text, escaped
# How often an idle listener checks that its socket path still names its socket: a session
# folder removed under it would otherwise leave it listening on a name nobody can reach.
CHECK_S = 1.0

OnLine = Callable[[dict[str, Any]], bool]


class Listener:
    """Bind ``<session_dir>/inbox.sock``, hand each JSON line to ``on_line``, ack it.

    ``on_line(obj) -> bool`` decides the ack. Calls are serialised, one line at a time.
    A line whose ``id`` was handed on already (the last ``remember`` ids) is acked ok
    and not handed on again: a sender that timed out and retried must not cause a
    second delivery. Nor is a notice whose every message the session's model was handed
    already (``said.jsonl``, bus.delivery.said); one that repeats some is handed on with
    them listed in ``repeats``. Those ids are also kept in ``heard.jsonl``: a sender that timed out
    waiting for the ack put the line on the file floor too, and a drain skips it there.
    """

    def __init__(
        self,
        session_dir: Path,
        on_line: OnLine,
        *,
        remember: int = 1000,
        read_timeout: float = 30.0,
        on_fail: Callable[[str], None] | None = None,
    ) -> None:
        self.session_dir = Path(session_dir)
        self.path = self.session_dir / SOCKET
        self.on_line = on_line
        self.remember = remember
        self.read_timeout = read_timeout
        # Told why when the listener stops on its own (its socket path vanished and could
        # not be bound again); ``error`` says it too.
        self.on_fail = on_fail
        self.error: str | None = None
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._said = SaidCache(self.session_dir)
        self._handle_lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._stopped = threading.Event()
        self._server: socket.socket | None = None
        self._wake: tuple[int, int] | None = None
        self._inode: tuple[int, int] | None = None
        self._accepter: threading.Thread | None = None

    @classmethod
    def for_session(cls, floor: Floor, sid: str, on_line: OnLine, **kw: Any) -> Listener:
        """A listener for ``sid`` under ``floor``'s tree (the id is checked first)."""
        return cls(floor.session_dir(sid, create=True), on_line, **kw)

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> Listener:
        """Bind and start accepting in a background thread."""
        if self._server is not None:
            return self
        if not self.session_dir.is_dir():
            os.makedirs(self.session_dir, mode=0o700, exist_ok=True)
            os.chmod(self.session_dir, 0o700)
        try:
            # A path too long for a socket address is bound through a short link.
            if unix_socket.live(self.path):
                # Unlinking a live listener's socket would silently steal its messages.
                raise Refused(f"a listener is already live on {self.path}", code="listening")
            server = unix_socket.listen(self.path, 64)
        except unix_socket.Unreachable as exc:
            raise BadInput(
                f"cannot listen on {self.path}: {exc}; delivery stays on the file"
            ) from None
        st = os.stat(self.path)
        self._inode = (st.st_dev, st.st_ino)
        self._server = server
        self._wake = os.pipe()
        self._stopped.clear()
        self._accepter = threading.Thread(
            target=self._accept_loop, name="inbox-listen", daemon=True
        )
        self._accepter.start()
        return self

    def stop(self) -> None:
        """Stop accepting, close connections and remove the socket file (if still ours)."""
        if self._server is None:
            return
        self._stopped.set()
        assert self._wake is not None
        os.write(self._wake[1], b"x")  # wakes the accept loop's select at once
        if self._accepter is not None:
            self._accepter.join(timeout=5)
        with self._conns_lock:
            for conn in list(self._conns):
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        for t in self._threads:
            t.join(timeout=5)
        self._server.close()
        self._server = None
        for fd in self._wake:
            os.close(fd)
        self._wake = None
        try:
            st = os.stat(self.path)
            # Another listener may have replaced our socket; its file is not ours to remove.
            if (st.st_dev, st.st_ino) == self._inode:
                os.unlink(self.path)
        except OSError:  # gone, or its folder is (a file where it was)
            pass

    def __enter__(self) -> Listener:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # --- internals ---------------------------------------------------------------------

    def _accept_loop(self) -> None:
        assert self._server is not None and self._wake is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self._server, selectors.EVENT_READ)
            sel.register(self._wake[0], selectors.EVENT_READ)
            while not self._stopped.is_set():
                ready = sel.select(CHECK_S)
                if not ready and not self._stopped.is_set() and not self._still_bound():
                    old = self._server
                    if not self._bind_again():
                        return
                    sel.unregister(old)
                    old.close()
                    sel.register(self._server, selectors.EVENT_READ)
                for key, _ in ready:
                    if key.fileobj is not self._server or self._stopped.is_set():
                        continue
                    try:
                        conn, _addr = self._server.accept()
                    except OSError:
                        continue
                    t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
                    self._threads = [x for x in self._threads if x.is_alive()]
                    self._threads.append(t)
                    t.start()

    def _still_bound(self) -> bool:
        """Does the socket path still name the socket this listener bound?"""
        try:
            st = os.stat(self.path)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == self._inode

    def _bind_again(self) -> bool:
        """The socket path vanished (its session folder removed, the file unlinked) or
        names another socket: bind it again and say so, or, when that cannot be done (a
        live listener is there now, the folder cannot be made), say why and stop: a
        listener never stays deaf in silence."""
        try:
            if not self.session_dir.is_dir():
                os.makedirs(self.session_dir, mode=0o700, exist_ok=True)
                os.chmod(self.session_dir, 0o700)
            if unix_socket.live(self.path):
                raise Refused(f"another listener is live on {self.path}", code="listening")
            server = unix_socket.listen(self.path, 64)
            st = os.stat(self.path)
        except (OSError, BusError) as exc:
            self.error = f"{self.path} vanished and could not be bound again: {exc}"
            print(f"inbox listen: {self.error}; stopped", file=sys.stderr, flush=True)
            self._stopped.set()
            if self.on_fail is not None:
                self.on_fail(self.error)
            return False
        self._inode = (st.st_dev, st.st_ino)
        self._server = server
        print(
            f"inbox listen: {self.path} vanished (its session folder removed?); listening again",
            file=sys.stderr,
            flush=True,
        )
        return True

    def _serve(self, conn: socket.socket) -> None:
        with self._conns_lock:
            self._conns.add(conn)
        try:
            conn.settimeout(self.read_timeout)
            buf = b""
            while not self._stopped.is_set():
                try:
                    chunk = conn.recv(65536)
                except OSError:
                    return
                if chunk:
                    buf += chunk
                elif buf.strip():
                    buf += b"\n"  # the sender closed after an unterminated line
                lines = buf.split(b"\n")
                buf = lines.pop()
                for raw in lines:
                    if raw.strip():
                        conn.sendall(ACK_OK if self._handle(raw) else ACK_NO)
                if not chunk:
                    return
                if len(buf) > MAX_LINE:
                    conn.sendall(ACK_NO)
                    return
        except OSError:
            return
        finally:
            with self._conns_lock:
                self._conns.discard(conn)
            conn.close()

    def _handle(self, raw: bytes) -> bool:
        try:
            obj = json.loads(raw)
        except ValueError:
            return False
        if not isinstance(obj, dict):
            return False
        # A message id is its sender's: another sender's line with the same id is no
        # duplicate of it (bus.delivery.floor_lines.line_key).
        key = line_key(obj)
        with self._handle_lock:
            if key is not None and key in self._seen:
                self._seen.move_to_end(key)
                return True
            # Heard once: what this session's model was handed already (by this listener
            # or a drain) is not handed on again; a notice repeating part says which.
            kept = unsaid(obj, self._said.keys())
            try:
                ok = kept is None or self.on_line(kept) is True
            except Exception as exc:  # a handler bug refuses the line; the file keeps it
                print(f"inbox listen: handler failed: {exc!r}", file=sys.stderr)
                ok = False
            if ok and kept is not None:
                try:
                    record_said(self.session_dir, [kept])
                except OSError as exc:
                    print(f"inbox listen: {SAID} not written: {exc}", file=sys.stderr)
            if ok and key is not None:
                # On the file too if our ack comes after the sender's wait: the drain
                # then skips it (bus.delivery.floor_lines.heard_ids). Not recorded, it is seen
                # twice at worst.
                try:
                    record_heard(self.session_dir, [obj], self.remember)
                except OSError as exc:
                    print(f"inbox listen: {HEARD} not written: {exc}", file=sys.stderr)
                self._seen[key] = None
                while len(self._seen) > self.remember:
                    self._seen.popitem(last=False)
            return ok


def print_handler(out: TextIO) -> OnLine:
    """A handler that writes each line to ``out`` as one JSON line."""

    def on_line(obj: dict[str, Any]) -> bool:
        try:
            out.write(json.dumps(obj, ensure_ascii=False) + "\n")
            out.flush()
        except (OSError, ValueError):
            return False
        return True

    return on_line


def exec_handler(cmd: str) -> OnLine:
    """A handler that pipes each line to ``cmd`` (a shell command) on stdin; ok iff exit 0.

    The sender waits only 1 s for the ack: a slower command means the line also lands
    on the file floor.
    """

    def on_line(obj: dict[str, Any]) -> bool:
        data = (json.dumps(obj, ensure_ascii=False) + "\n").encode()
        try:
            done = subprocess.run(cmd, shell=True, input=data, check=False)
        except OSError:
            return False
        return done.returncode == 0

    return on_line


def run_listener(
    floor: Floor,
    sid: str,
    exec_cmd: str | None = None,
    out: TextIO = sys.stdout,
    *,
    stop: threading.Event | None = None,
    ready: threading.Event | None = None,
) -> int:
    """``inbox listen SID``: print (or pipe to ``exec_cmd``) each line until stopped.

    Blocks until Ctrl-C, SIGTERM, or ``stop`` is set; ``ready`` is set once listening.
    1 when the listener stopped on its own (its socket path vanished and could not be
    bound again: said on stderr), else 0.
    """
    handler = exec_handler(exec_cmd) if exec_cmd else print_handler(out)
    done = stop or threading.Event()
    previous: Any = None
    in_main = threading.current_thread() is threading.main_thread()
    if in_main:
        previous = signal.signal(signal.SIGTERM, lambda *_: done.set())
    failed: list[str] = []

    def on_fail(why: str) -> None:
        failed.append(why)
        done.set()

    try:
        with Listener.for_session(floor, sid, handler, on_fail=on_fail) as listener:
            print(f"inbox listen: listening on {listener.path}", file=sys.stderr, flush=True)
            if ready is not None:
                ready.set()
            done.wait()
    except KeyboardInterrupt:
        pass
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)
    return 1 if failed else 0
