"""Private files and directories: 0700 directories, 0600 files, whatever the umask."""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path


class LinkRefused(PermissionError):
    """A link where the inbox keeps a private file of its own; nothing was written."""


def private_dirs(path: Path) -> Path:
    """Create ``path`` and any missing parents 0700 (mkdir's mode is filtered by the umask,
    so each is chmod-ed); an existing ``path`` is tightened to 0700 too."""
    path = Path(path)
    missing: list[Path] = []
    p = path
    while not p.exists():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(d, 0o700)
        os.chmod(d, 0o700)
    if path.is_dir() and not path.is_symlink():
        os.chmod(path, 0o700)
    return path


def secret_file(path: Path) -> str:
    """The secret kept in ``path`` (0600), made the first time it is asked for."""
    path = Path(path)
    private_dirs(path.parent)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    value = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w") as fh:
        os.fchmod(fh.fileno(), 0o600)
        fh.write(value + "\n")
    return value


def write_private(path: Path, text: str) -> Path:
    """Replace ``path`` with ``text``, 0600 from its first byte, whole (a reader sees the old
    file or the new one). A link at ``path`` is refused (:class:`LinkRefused`): someone
    may be steering the file elsewhere, and a secret is never written through it. The
    new file is made ``O_EXCL | O_NOFOLLOW`` under a fresh name beside it, then renamed."""
    path = Path(path)
    try:
        if stat.S_ISLNK(os.lstat(path).st_mode):
            raise LinkRefused(
                f"{path} is a link; the inbox writes its private files only as files of its "
                "own: remove the link and run the command again"
            )
    except FileNotFoundError:
        pass
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(3):
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}")
        try:
            fd = os.open(tmp, flags, 0o600)
            break
        except FileExistsError:  # a name taken (a leftover, a link someone made): another
            continue
    else:
        raise FileExistsError(f"no fresh name beside {path} to write it under")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            os.fchmod(fh.fileno(), 0o600)  # the umask may have narrowed it further: exact
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path
