"""Floor folders and files that are this user's (bus.delivery.floor's ownership checks).

Every folder of ``$INBOX_HOME/inbox/<sid>/`` must be a real folder (no link below the
home) owned by this user; its mode is made 0700. Files are opened with ``O_NOFOLLOW``
relative to their checked folder, then checked open (a regular file of this user's, mode
made 0600 on the descriptor, never by path). Anything else is :class:`UnsafeFloor`, in
words: an ``OSError``, so a delivery that meets it puts its notice back as for any floor
failure.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path


class UnsafeFloor(PermissionError):
    """A floor folder or file that is not safely this user's; nothing was written."""


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_safe_parents: set[Path] = set()  # homes whose home and inbox/ folders passed the check


def _refuse_owner(path: Path | str, uid: int) -> UnsafeFloor:
    return UnsafeFloor(
        f"{path} belongs to another user (uid {uid}, this is uid {os.geteuid()}): the inbox "
        "will not deliver into a folder someone else controls; remove it, or set INBOX_HOME "
        "to a folder of your own"
    )


def _check_dir_fd(fd: int, path: Path | str) -> None:
    """An open folder must be this user's; its mode is made exactly 0700 (others shut
    out, the umask's narrowing undone)."""
    st = os.fstat(fd)
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeFloor(f"{path} is not a folder; the inbox refuses to use it")
    if st.st_uid != os.geteuid():
        raise _refuse_owner(path, st.st_uid)
    if st.st_mode & 0o777 != 0o700:
        os.fchmod(fd, 0o700)


def _open_dir(
    path: Path | str, *, follow: bool = False, dir_fd: int | None = None, shown: Path | None = None
) -> int:
    """Open a floor folder (no link followed unless ``follow``) and check it; errors name
    ``shown`` (the whole path of a folder opened by ``dir_fd``)."""
    shown = shown or Path(path)
    try:
        fd = os.open(path, _DIR_FLAGS | (0 if follow else _NOFOLLOW), dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ENOTDIR, errno.ELOOP):
            raise UnsafeFloor(
                f"{shown} is a link or a file where the inbox keeps a folder; "
                "the inbox refuses to use it"
            ) from None
        raise
    try:
        _check_dir_fd(fd, shown)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _mkdir_private(shown: Path, dir_fd: int | None, *, follow: bool = False) -> int:
    """Make the folder ``shown`` 0700 (if missing; by its name in ``dir_fd`` when given)
    and return it open, checked (:func:`_open_dir`)."""
    name = shown.name if dir_fd is not None else shown
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o700, dir_fd=dir_fd)  # the umask may loosen it: the check tightens
    return _open_dir(name, follow=follow, dir_fd=dir_fd, shown=shown)


def check_parents(home: Path) -> None:
    """The home (it may be a link: the user's own choice) and its ``inbox/`` folder,
    checked once a process: nobody else can change what a folder of ours holds."""
    if home in _safe_parents:
        return
    hfd = _open_dir(home, follow=True)
    try:
        os.close(_open_dir("inbox", dir_fd=hfd, shown=home / "inbox"))
    finally:
        os.close(hfd)
    _safe_parents.add(home)


def make_dirs(home: Path, sid: str) -> None:
    """``home/inbox/<sid>``, each folder made 0700 if missing and checked, by ``dir_fd``."""
    os.makedirs(home.parent, mode=0o700, exist_ok=True)
    hfd = _mkdir_private(home, None, follow=True)
    try:
        ifd = _mkdir_private(home / "inbox", hfd)
        try:
            os.close(_mkdir_private(home / "inbox" / sid, ifd))
        finally:
            os.close(ifd)
    finally:
        os.close(hfd)
    _safe_parents.add(home)


def open_private(path: Path, flags: int) -> int:
    """Open (creating 0600) a file of a checked folder: no link followed, this user's,
    a regular file; its mode made 0600 on the open file, never by path."""
    dfd = _open_dir(path.parent)
    try:
        try:
            fd = os.open(
                path.name, flags | os.O_CREAT | os.O_CLOEXEC | _NOFOLLOW, 0o600, dir_fd=dfd
            )
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UnsafeFloor(
                    f"{path} is a link; the inbox writes only files of its own there"
                ) from None
            raise
    finally:
        os.close(dfd)
    try:
        _check_file_fd(fd, path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _check_file_fd(fd: int, path: Path) -> None:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise UnsafeFloor(f"{path} is not a regular file; the inbox refuses to use it")
    if st.st_uid != os.geteuid():
        raise _refuse_owner(path, st.st_uid)
    if st.st_mode & 0o777 != 0o600:
        os.fchmod(fd, 0o600)


def open_read(path: Path) -> int:
    """Open a floor file for reading: no link followed, this user's regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | _NOFOLLOW)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeFloor(f"{path} is a link; the inbox reads only files of its own") from None
        raise
    try:
        _check_file_fd(fd, path)
    except BaseException:
        os.close(fd)
        raise
    return fd
