"""Two local users for the trust tests: a victim and another user of the same host.

Each test gets two fresh unix users (``useradd``; the suite runs as root), removed with
their ``/tmp/inbox-<uid>`` folders afterwards. Code runs as one of them in a forked child
that drops its privileges (:func:`as_user`): the interpreter's own files may sit where
another user cannot read them, so what the child needs is imported before the drop.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import pwd
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

# What a victim's command imports, loaded before the child drops to its user.
PRELOAD = (
    "bus.lanes.entry",
    "bus.lanes.send",
    "bus.surfaces.command_server",
    "bus.lanes.read",
    "bus.surfaces.cli.app",
    "bus.local.runtime_dir",
    "bus.ops.up",
    "json",
    "hashlib",
    "email.parser",
    "redis",
    "redis.connection",
)


class User(NamedTuple):
    name: str
    uid: int
    gid: int


def _add_user() -> User:
    name = f"inb{uuid.uuid4().hex[:10]}"
    subprocess.run(
        ["useradd", "-M", "-N", "-s", "/usr/sbin/nologin", name],
        check=True,
        capture_output=True,
        timeout=30,
    )
    entry = pwd.getpwnam(name)
    return User(name, entry.pw_uid, entry.pw_gid)


def _remove_user(user: User) -> None:
    subprocess.run(["userdel", user.name], capture_output=True, timeout=30)
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        shutil.rmtree(f"/tmp/inbox-{user.uid}")
    with contextlib.suppress(FileNotFoundError, IsADirectoryError):
        os.unlink(f"/tmp/inbox-{user.uid}")


@pytest.fixture
def two_users() -> Iterator[tuple[User, User]]:
    """(victim, other): two fresh users of this host."""
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("needs root and useradd to make two local users")
    made: list[User] = []
    try:
        made += [_add_user(), _add_user()]
        yield made[0], made[1]
    finally:
        for user in made:
            _remove_user(user)


def _drop(user: User) -> None:
    os.setgroups([])
    os.setgid(user.gid)
    os.setuid(user.uid)


def as_user(user: User, fn: Callable[[], Any], timeout: float = 60.0) -> Any:
    """``fn()`` run as ``user`` in a forked child; its result (pickled back), or the
    exception it raised re-raised here as ``RuntimeError`` with its repr."""
    for name in PRELOAD:
        __import__(name)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(r)
        try:
            _drop(user)
            out: tuple[str, Any] = ("ok", fn())
        except BaseException as exc:  # every failure goes back to the test
            out = ("err", repr(exc))
        data = pickle.dumps(out)
        while data:
            data = data[os.write(w, data) :]
        os._exit(0)
    os.close(w)
    chunks = []
    try:
        while True:
            ready, _, _ = select.select([r], [], [], timeout)
            assert ready, f"the child of {user.name} gave no answer in {timeout}s"
            chunk = os.read(r, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(r)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)
        os.waitpid(pid, 0)
    kind, value = pickle.loads(b"".join(chunks))
    if kind == "err":
        raise RuntimeError(value)
    return value


def run_inbox(argv: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    """``inbox ARGV`` as its console entry runs it, in this (dropped) process: exit code,
    stdout, stderr."""
    from bus.lanes import entry

    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()  # noqa: SIM115
    os.environ.clear()
    os.environ.update(env)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out.fileno(), 1)
    os.dup2(err.fileno(), 2)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
    sys.argv = ["inbox", *argv]
    try:
        entry.main()
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else 1
    sys.stdout.flush()
    sys.stderr.flush()
    out.seek(0)
    err.seek(0)
    return code, out.read().decode(), err.read().decode()


class Listener:
    """Sockets another user listens on: every connection and byte they get is counted
    (in a child of that user's, until :meth:`close`)."""

    def __init__(self, user: User, paths: list[Path]) -> None:
        for name in PRELOAD:
            __import__(name)
        self.r, w = os.pipe()
        ready_r, ready_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # pragma: no cover - the child
            os.close(self.r)
            os.close(ready_r)
            try:
                _drop(user)
                self._serve(paths, w, ready_w)
            finally:
                os._exit(0)
        os.close(w)
        os.close(ready_w)
        ready, _, _ = select.select([ready_r], [], [], 30)
        got = os.read(ready_r, 64) if ready else b""
        os.close(ready_r)
        assert got == b"ready", f"the other user's listener did not start: {got!r}"

    @staticmethod
    def _serve(paths: list[Path], w: int, ready_w: int) -> None:
        servers = []
        for path in paths:
            srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            srv.bind(str(path))
            os.chmod(path, 0o777)
            srv.listen(16)
            servers.append(srv)
        os.write(ready_w, b"ready")
        conns: list[socket.socket] = []
        while True:
            ready, _, _ = select.select([*servers, *conns], [], [])
            for s in ready:
                if s in servers:
                    conn, _ = s.accept()
                    conns.append(conn)
                    os.write(w, b"c\n")
                    continue
                data = s.recv(65536)
                if not data:
                    conns.remove(s)
                    s.close()
                os.write(w, b"b%d\n" % len(data))

    def close(self) -> tuple[int, int]:
        """(connections, bytes) the listener got."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, 9)
        os.waitpid(self.pid, 0)
        got = b""
        while chunk := os.read(self.r, 65536):
            got += chunk
        os.close(self.r)
        lines = got.split()
        return lines.count(b"c"), sum(int(x[1:]) for x in lines if x.startswith(b"b"))


def make_folders(user: User, folder: Path, mode: int = 0o777) -> None:
    """``folder`` and its missing parents made by ``user`` (as another user would)."""

    def make() -> None:
        missing = []
        p = folder
        while not p.exists():
            missing.append(p)
            p = p.parent
        for d in reversed(missing):
            d.mkdir()
            os.chmod(d, mode)

    as_user(user, make)
