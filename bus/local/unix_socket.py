"""A session's unix socket reached whatever the length of its path.

A unix socket's address holds at most 108 bytes on Linux and 104 on macOS
(``sun_path``), and ``$INBOX_HOME/inbox/<sid>/inbox.sock`` can be longer (a deep home, a
36-character session id). The socket file always lives at that path (the harness
contract's place, and where prox looks); a path that does not fit is bound and connected
to through a short link to its folder instead:

    /tmp/inbox-<uid>/               0700, this user's (a link or another's is refused)
      <hash of the session folder>  -> $INBOX_HOME/inbox/<sid>   (a symbolic link)

so ``/tmp/inbox-<uid>/<hash>/inbox.sock`` names the same socket file. The kernel resolves
the link while it binds or connects; only the address it is handed must be short. The
folder is fixed (not ``$TMPDIR`` or ``$XDG_RUNTIME_DIR``) because the hook that listens
and the worker that connects may run with different environments, and both must find the
same name. Every listener, waiter and sender goes through :func:`listen` and
:func:`connect` here; :func:`problem` says in words why a socket cannot be reached.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import stat
import sys
from pathlib import Path

from bus.core.ids import is_session_id

from .runtime_dir import UnsafeFolder, fix_for, open_private, runtime_root

# sun_path is 104 bytes on macOS and 108 on Linux; a longer address cannot be bound.
SOCKET_PATH_MAX = 104 if sys.platform == "darwin" else 108
_NAME_CHARS = 24  # of a sha256 in hex: 96 bits, no two folders share a link


class Unreachable(OSError):
    """A socket path that can be neither bound nor connected to: ``reason`` says why,
    ``fix`` what mends it (the message holds both)."""

    def __init__(self, reason: str, fix: str) -> None:
        super().__init__(f"{reason}; {fix}")
        self.reason, self.fix = reason, fix


def fits(path: str | os.PathLike[str]) -> bool:
    """True if ``path`` itself can be a socket's address (its bytes within the OS cap)."""
    return len(os.fsencode(os.fspath(path))) <= SOCKET_PATH_MAX


def link_name(folder: Path) -> str:
    """The short link's name for ``folder``: a hash of its absolute path."""
    return hashlib.sha256(os.fsencode(os.path.abspath(folder))).hexdigest()[:_NAME_CHARS]


# What a session whose socket cannot be had loses (said by status, doctor and its start).
EFFECT = "cannot be woken while idle nor hear a message mid-turn; deliveries wait for its next turn"
SOCKET = "inbox.sock"  # a session's socket, in its floor folder (bus.delivery.floor)
SHORTER = (
    "or set INBOX_HOME to a shorter folder (a session's folder path of at most "
    f"{SOCKET_PATH_MAX - len(SOCKET) - 1} bytes needs no link)"
)


def _open_root(root: Path) -> int:
    """``root`` made (0700) if missing and opened, checked by
    bus.local.runtime_dir.open_private (a link, a file, another user's folder or one
    others can write to is refused)."""
    try:
        return open_private(root, root)
    except UnsafeFolder as exc:
        raise Unreachable(exc.reason, exc.fix) from None


def _place_link(dfd: int, name: str, target: str, root: Path) -> None:
    """The link ``name`` in the open folder ``dfd`` pointing at ``target``, replaced
    atomically when it points elsewhere (two makers race to the same link harmlessly)."""
    try:
        if os.readlink(name, dir_fd=dfd) == target:
            return
    except FileNotFoundError:
        _prune(dfd)
    except OSError:
        pass  # not a link: replaced below, or refused when a folder is in the way
    # A name of this call's own: threads of one process (a worker's) may make it together.
    tmp = f".{name}.{os.getpid()}.{os.urandom(4).hex()}"
    os.symlink(target, tmp, dir_fd=dfd)
    try:
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dfd)
        raise Unreachable(
            f"{root / name} is in the way of the socket's short link ({exc.strerror})",
            f"remove {root / name}, {SHORTER}",
        ) from None


def _prune(dfd: int) -> None:
    """Remove the links whose folder is gone (a session folder removed, a test's home
    deleted): a link is made only for a new name, so they cannot pile up unseen."""
    for name in os.listdir(dfd):
        if _dangling(dfd, name):
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=dfd)


def _dangling(dfd: int, name: str) -> bool:
    try:
        if not stat.S_ISLNK(os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode):
            return False
        os.stat(name, dir_fd=dfd)  # follows the link
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return False


def address(path: Path, root: Path | None = None) -> str:
    """The address to bind or connect for the socket at ``path``: ``path`` itself when
    it fits, else ``<root>/<link>/<name>`` through a short link to its folder (made or
    mended here). :class:`Unreachable` when neither can be had."""
    if fits(path):
        return os.fspath(path)
    root = runtime_root() if root is None else root
    folder = os.path.abspath(path.parent)
    name = link_name(Path(folder))
    short = os.path.join(root, name, path.name)
    if not fits(short):
        raise Unreachable(
            f"the socket's short address {short} is too long for a unix socket too",
            SHORTER.removeprefix("or "),
        )
    try:
        dfd = _open_root(root)
    except Unreachable:
        raise
    except OSError as exc:
        raise Unreachable(f"{root} cannot be made ({exc.strerror})", fix_for(root)) from None
    try:
        _place_link(dfd, name, folder, root)
    except Unreachable:
        raise
    except OSError as exc:
        raise Unreachable(
            f"the short link in {root} cannot be made ({exc.strerror})", fix_for(root)
        ) from None
    finally:
        os.close(dfd)
    return short


def problem(path: Path, root: Path | None = None) -> dict[str, str] | None:
    """Why the socket at ``path`` can be neither bound nor connected to, as
    ``{"reason", "fix"}``, or None when it can (a short link it needs is made here)."""
    try:
        address(path, root)
    except Unreachable as exc:
        return {"reason": exc.reason, "fix": exc.fix}
    return None


def session_problems(home: Path, sids: list[str]) -> dict[str, dict[str, str]]:
    """The sessions of ``sids`` whose socket under ``home`` can be neither bound nor
    connected to, each with its ``{"reason", "fix"}``: they cannot be woken while idle nor
    hear a message mid-turn. An invalid id is left out (it never becomes a path)."""
    out = {}
    for sid in sids:
        if not is_session_id(sid):
            continue
        found = problem(home / "inbox" / sid / SOCKET)
        if found is not None:
            out[sid] = found
    return out


def connect(path: Path, timeout: float, root: Path | None = None) -> socket.socket:
    """A connected socket to the listener at ``path`` (``OSError`` when none answers)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(address(path, root))
    except BaseException:
        sock.close()
        raise
    return sock


def live(path: Path, root: Path | None = None) -> bool:
    """True when a listener answers at ``path``. A socket file nobody answers (its
    listener died without cleaning up) is removed: it is stale."""
    if not os.path.lexists(path):
        return False
    try:
        connect(path, 0.2, root).close()
    except Unreachable:
        raise
    except OSError:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return False
    return True


def listen(path: Path, backlog: int, root: Path | None = None) -> socket.socket:
    """A listening socket bound at ``path`` (mode 0600). The caller has checked with
    :func:`live` that no other listener is there: binding over one would steal its lines."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(address(path, root))
        os.chmod(path, 0o600)
        server.listen(backlog)
    except BaseException:
        server.close()
        raise
    return server


__all__ = [
    "EFFECT",
    "SOCKET",
    "SOCKET_PATH_MAX",
    "Unreachable",
    "address",
    "connect",
    "fits",
    "link_name",
    "listen",
    "live",
    "problem",
    "runtime_root",
    "session_problems",
]
