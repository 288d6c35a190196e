"""Private files and directories: 0700 directories, 0600 files, whatever the umask."""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path


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
