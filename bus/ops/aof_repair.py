"""``inbox repair-aof``: the embedded server's damaged append-only file, repaired with the
check tools its own binary carries.

The server binary is also ``valkey-check-aof`` and ``valkey-check-rdb`` (``redis-check-*``
for a Redis binary) when started under that name, so the repair needs nothing the install
does not ship. Each file the manifest lists is checked on its own: the Valkey 9 tool does
not take its own RDB preamble (``VALKEY080``) as a base when given the whole manifest, but
checks a base ``.rdb`` as an RDB and an incremental file as an AOF correctly. A damaged
incremental file that is the last one is cut after its last whole command (the tool's
``--fix``), after the whole AOF is copied beside it; the answer says how many bytes were
cut. A damaged base, or damage before the last file, is refused in words: cutting there
would replay later writes without the ones lost.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from bus.core.errors import BusError
from bus.core.settings import Settings
from bus.local.private_files import private_dirs

from .embedded import server_binary
from .supervise import AlreadyRunning, HomeLock

AOF_DIR = "appendonlydir"
MANIFEST = "appendonly.aof.manifest"
OLD_STYLE = "appendonly.aof"
_OK_UP_TO = re.compile(r"ok_up_to=(\d+)")


class AofRefused(BusError):
    """The AOF cannot be repaired here, or there is none; nothing was changed."""

    code = "aof_not_repaired"


def _tool(binary: str, name: str, *args: str, answer: str = "") -> subprocess.CompletedProcess[str]:
    """The server binary run as its check tool ``name`` (its argv[0] picks the tool)."""
    flavour = "valkey" if "valkey" in Path(binary).name else "redis"
    return subprocess.run(
        [f"{flavour}-{name}", *args],
        executable=binary,
        input=answer,
        capture_output=True,
        text=True,
        timeout=300,
    )


def aof_files(data_dir: Path) -> tuple[Path, list[tuple[Path, str]]]:
    """The AOF's folder (or file) and its files in load order with their type (``b`` base,
    ``i`` incremental; the old single file is ``i``)."""
    folder = data_dir / AOF_DIR
    manifest = folder / MANIFEST
    if manifest.is_file():
        files: list[tuple[Path, str]] = []
        for line in manifest.read_text().splitlines():
            words = line.split()
            fields = dict(zip(words[::2], words[1::2], strict=False))
            if "file" in fields and fields.get("type") in ("b", "i"):
                files.append((folder / Path(fields["file"]).name, fields["type"]))
        files.sort(key=lambda f: 0 if f[1] == "b" else 1)  # the base loads first
        return folder, files
    old = data_dir / OLD_STYLE
    if old.is_file():
        return old, [(old, "i")]
    raise AofRefused(f"no append-only file under {data_dir}: nothing to repair")


def _check(binary: str, path: Path, kind: str) -> tuple[bool, int]:
    """Whether ``path`` is whole, and up to which byte it is good (its size when whole)."""
    size = path.stat().st_size
    if kind == "b" and path.suffix == ".rdb":
        return _tool(binary, "check-rdb", str(path)).returncode == 0, size
    out = _tool(binary, "check-aof", str(path))
    good = _OK_UP_TO.search(out.stdout)
    ok_up_to = int(good.group(1)) if good else 0
    return out.returncode == 0 and "is valid" in out.stdout, ok_up_to


def _backup(source: Path, data_dir: Path) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = data_dir / f"aof-before-repair-{stamp}"
    if source.is_dir():
        shutil.copytree(source, target)
    else:
        private_dirs(target)
        shutil.copy2(source, target / source.name)
    target.chmod(0o700)
    return target


def repair_aof(data_dir: Path) -> dict[str, Any]:
    """Check the AOF under ``data_dir`` and cut a damaged last file after its last whole
    command, a copy of the AOF kept first. The server must not be running (the caller
    holds ``inbox up``'s lock). Raises :class:`AofRefused` (nothing changed) when there
    is no AOF or the damage is where a cut would lose order."""
    binary = server_binary()
    where, files = aof_files(data_dir)
    damaged = []
    for index, (path, kind) in enumerate(files):
        if not path.is_file():
            raise AofRefused(f"{path.name}, listed in the AOF manifest, is missing")
        whole, good_to = _check(binary, path, kind)
        if not whole:
            damaged.append((index, path, kind, good_to))
    checked = [p.name for p, _ in files]
    if not damaged:
        return {
            "ok": True,
            "repaired": False,
            "aof": str(where),
            "checked": checked,
            "message": "the append-only file is whole: nothing to repair",
        }
    index, path, kind, good_to = damaged[0]
    if kind == "b" or index != len(files) - 1:
        what = "the base snapshot" if kind == "b" else "a file before the last"
        raise AofRefused(
            f"{path.name} ({what}) is damaged at byte {good_to}: cutting it would load later "
            f"writes without the lost ones; restore {where} from a backup, or copy it aside "
            "and start with an empty store"
        )
    size = path.stat().st_size
    backup = _backup(where, data_dir)
    _tool(binary, "check-aof", "--fix", str(path), answer="y\n")
    whole, _ = _check(binary, path, kind)
    after = path.stat().st_size
    if not whole:
        raise AofRefused(
            f"the check tool could not repair {path.name}; the AOF as it was is in {backup}"
        )
    return {
        "ok": True,
        "repaired": True,
        "aof": str(where),
        "checked": checked,
        "file": path.name,
        "cut_at": after,
        "dropped_bytes": size - after,
        "backup": str(backup),
        "message": f"{path.name} was damaged at byte {after}: the {size - after} bytes "
        f"after it (the writes in them) were cut so the server loads the rest; the AOF as "
        f"it was is kept in {backup}",
    }


def repair_embedded_aof(settings: Settings) -> dict[str, Any]:
    """:func:`repair_aof` on the embedded server's data under ``$INBOX_HOME``, holding
    ``inbox up``'s lock so neither runs while the other does."""
    try:
        lock = HomeLock(settings.home).acquire()
    except AlreadyRunning as exc:
        raise AofRefused(
            f"inbox up is running for {settings.home} (pid {exc.pid}): stop it (Ctrl-C), "
            "then repair",
            code="server_running",
        ) from exc
    try:
        return repair_aof(settings.embedded_data)
    finally:
        lock.release()


__all__ = ["AofRefused", "aof_files", "repair_aof", "repair_embedded_aof"]
