"""The send lane: ``inbox send`` (``reply``, ``withdraw``, ``decide``) handed to the server
that ``inbox up`` keeps warm (bus.surfaces.command_server), standard library only.

:func:`run` answers the exit code once the server's child has run the command on this
process's stdin, stdout and stderr, or ``None`` when nothing ran and the full command line
must run it here: no server (no socket, nobody listening), a server of another install,
one that does not take the request within :data:`TAKE_S`, any error before the go, or a
command that may run long (``send --wait``, ``send --jsonl``: :data:`LONG`).
The exchange is described in bus.surfaces.command_server.
"""

from __future__ import annotations

import _socket
import os
import sys

from bus.core import lane_names
from bus.core.lane_names import COMMAND_MAGIC
from bus.local.command_socket import command_socket

OFF_VAR = "INBOX_FAST_SEND"
TAKE_S = 2.0  # seconds a server has to take the request before this process runs it
# Options that make a command run long (a wait for the answering turn, a stream of lines):
# such a command runs here, where its start-up is a small part of its time.
LONG = ("--wait", "--jsonl")


def peer_uid(sock: _socket.socket) -> int | None:
    """The user id of the process at the other end of ``sock``, as the kernel says it
    (``SO_PEERCRED``); None where the platform does not say."""
    opt = getattr(_socket, "SO_PEERCRED", None)
    if opt is None:
        return None
    raw = sock.getsockopt(_socket.SOL_SOCKET, opt, 12)
    return int.from_bytes(raw[4:8], sys.byteorder, signed=True)  # struct ucred: pid, uid, gid


def _refuse_peer(path: str, uid: int) -> int:
    message = (
        f"the command server at {path} runs as another user (uid {uid}); nothing was sent "
        f"to it. Remove {path} (its owner or an administrator) and restart inbox up"
    )
    import json  # only on this rare path: the client stays cheap to start

    refusal = {"ok": False, "error": "unsafe_socket", "message": message}
    sys.stdout.write(json.dumps(refusal, ensure_ascii=False) + "\n")
    sys.stderr.write(f"inbox: {message}\n")
    return 1


def header(argv: list[str]) -> bytes:
    """The request (bus.surfaces.command_server's docstring): length, then the header."""
    stdio = []
    for stream in (sys.stdin, sys.stdout, sys.stderr):
        stdio += [stream.encoding.encode(), str(stream.errors).encode()]
    fields = [
        COMMAND_MAGIC,
        os.fsencode(lane_names.__file__),  # the install: the server's must be the same file
        os.fsencode(sys.executable),
        os.getcwdb(),
        *stdio,
        b"%d" % len(argv),
        *(os.fsencode(a) for a in argv),
        *(k + b"=" + v for k, v in os.environb.items()),
    ]
    data = b"\0".join(fields)
    return b"%010d" % len(data) + data


def _fds() -> bytes:
    return b"".join(fd.to_bytes(4, sys.byteorder) for fd in (0, 1, 2))


def run(argv: list[str], home: str) -> int | None:
    """Run ``argv`` on the warm server of ``home``; its exit code, or None (see above)."""
    if os.environ.get(OFF_VAR) == "0" or None in (sys.stdin, sys.stdout, sys.stderr):
        return None
    if any(a in LONG or a.startswith("--jsonl=") for a in argv):
        return None  # a long command would hold one of the server's few workers
    try:
        path = command_socket(home)
    except Exception:  # an unsafe folder: the full command line refuses it in words
        return None
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(TAKE_S)
        try:
            sock.connect(path)
            # Not a byte (environment, argv, descriptors) to a server of another user's.
            uid = peer_uid(sock)
            if uid is not None and uid != os.geteuid():
                return _refuse_peer(path, uid)
            data = header(argv)
            anc = [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, _fds())]
            sent = sock.sendmsg([data], anc)
            while sent < len(data):
                sent += sock.send(data[sent:])
            if sock.recv(1) != b"+":
                return None  # "full", or the server went away: nothing ran
            sock.settimeout(None)
            sock.sendall(b"g")
        except (OSError, ValueError):
            return None
        answer = b""
        while not answer.endswith(b"\n") and (chunk := sock.recv(64)):
            answer += chunk
    finally:
        sock.close()
    code = answer[1:].strip()
    if answer.startswith(b"=") and code.lstrip(b"-").isdigit():
        return int(code)
    sys.stderr.write("inbox: the command server ended before the command did\n")
    return 1
