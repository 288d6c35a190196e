"""The one folder outside ``$INBOX_HOME`` where the bus keeps sockets and passwords.

A unix socket's path must be short (``sun_path``), so when ``$INBOX_HOME`` is deep the
embedded Redis's socket, its password and the command server's socket live in a folder
under ``/tmp``, as do the short links to long session sockets (bus.local.unix_socket):

    /tmp/inbox-<uid>/               0700, this user's
      redis-<hash of the home>/     0700, this user's: redis.sock, password, commands.sock
      <hash of a session folder>    -> $INBOX_HOME/inbox/<sid> (a link)

``/tmp`` is everyone's, so another user may have made that name first, as a folder they
can write to or as a link to one of theirs, and listen there: whoever connects would hand
its secrets to them. :func:`private_folder` is the one way in: it makes each level
(0700) or opens it without following links, and refuses, in words naming the folder and
the fix, one that is a link, a file, another user's, or open to others. It imports only
``os`` and the errors module: the command client and the read lane find the same folder.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

from bus.core.errors import Refused

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | _NOFOLLOW


class UnsafeFolder(Refused):
    """A folder outside ``$INBOX_HOME`` the bus will not put a socket or a secret in:
    ``reason`` says why, ``fix`` what mends it (the message holds both)."""

    code = "unsafe_folder"

    def __init__(self, folder: str, reason: str, fix: str) -> None:
        super().__init__(f"{reason}; {fix}", folder=folder)
        self.folder, self.reason, self.fix = folder, reason, fix


def runtime_root() -> Path:
    """This user's folder under ``/tmp``: ``/tmp/inbox-<uid>``. Fixed (not ``$TMPDIR``):
    processes started with different environments (a hook, the worker) must agree."""
    return Path(f"/tmp/inbox-{os.geteuid()}")


def is_runtime(path: Path) -> bool:
    """True when ``path`` is :func:`runtime_root` or inside it."""
    root = runtime_root()
    return path == root or root in path.parents


def fix_for(folder: Path | str) -> str:
    return (
        f"remove {folder} (its owner or an administrator, when it is not yours; the bus "
        "remakes it 0700 for this user), or set INBOX_HOME to a shorter folder"
    )


def _check(fd: int, where: str) -> None:
    st = os.fstat(fd)
    if st.st_uid != os.geteuid():
        raise UnsafeFolder(
            where,
            f"{where} belongs to another user (uid {st.st_uid}); the bus keeps sockets and "
            "passwords only in a folder of this user's",
            fix_for(where),
        )
    if st.st_mode & 0o022:
        raise UnsafeFolder(
            where,
            f"{where} can be written by other users (mode {st.st_mode & 0o777:o}, not 700); "
            "one of them may have put a socket there",
            fix_for(where),
        )
    if st.st_mode & 0o777 != 0o700:
        os.fchmod(fd, 0o700)  # nobody else could write to it: made private from now on


def _open_level(parent: int | None, name: str, where: str) -> int:
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o700, dir_fd=parent)
    try:
        fd = os.open(name, _FLAGS, dir_fd=parent)
    except OSError as exc:
        if exc.errno in (errno.ENOTDIR, errno.ELOOP):
            raise UnsafeFolder(
                where, f"{where} is a link or a file, not a folder", fix_for(where)
            ) from None
        raise UnsafeFolder(
            where, f"{where} cannot be opened ({exc.strerror})", fix_for(where)
        ) from None
    try:
        _check(fd, where)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_private(folder: Path, root: Path | None = None) -> int:
    """``folder`` (``root``, by default :func:`runtime_root`, or a folder inside it) made
    or opened level by level from ``root``'s parent without following a link, each level
    checked to be this user's, written by no one else, and left 0700; an open descriptor
    of it (the caller closes it). :class:`UnsafeFolder` otherwise."""
    root = runtime_root() if root is None else Path(os.path.abspath(root))
    folder = Path(os.path.abspath(folder))
    if folder != root and root not in folder.parents:
        raise ValueError(f"{folder} is not inside {root}")
    try:
        base = os.open(root.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise UnsafeFolder(
            str(root), f"{root.parent} cannot be opened ({exc.strerror})", fix_for(root)
        ) from None
    fd, where = base, root.parent
    try:
        for name in (root.name, *folder.relative_to(root).parts):
            where = where / name
            nxt = _open_level(fd, name, str(where))
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def private_folder(folder: Path) -> Path:
    """``folder`` made private: checked by :func:`open_private` when it is under ``/tmp``'s
    :func:`runtime_root`; else (a folder under ``$INBOX_HOME``, whose owner chose it) made
    0700 with its missing parents."""
    if is_runtime(Path(os.path.abspath(folder))):
        os.close(open_private(folder))
        return folder
    from .private_files import private_dirs

    return private_dirs(folder)


__all__ = [
    "UnsafeFolder",
    "fix_for",
    "is_runtime",
    "open_private",
    "private_folder",
    "runtime_root",
]
