"""Pictures a reply carries, read from an agent's sandbox root.

Every picture is checked before any is returned, so a caller that writes only after
:func:`read_pictures` succeeds writes nothing when one picture is refused. A picture's
type comes from its bytes, never its name. Pillow and filetype are imported when a
picture is checked, so the commands that carry none never load them.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import os
import stat
import tempfile
import unicodedata
import warnings
from dataclasses import dataclass
from pathlib import Path

from bus.core.errors import BadInput, Refused
from bus.core.models import FileRef

MAX_PICTURES = 4
MAX_PICTURE_BYTES = 5 * 1024 * 1024
# Declared width x height past this is refused before any decoding (a decompression bomb).
MAX_PIXELS = 40_000_000

# filetype's own matchers are loose (GIF is any "GIF..."), so each recognised type must
# also carry its full signature before it is accepted.
_SIGNATURES: dict[str, tuple[bytes, ...]] = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
}
# An animated PNG is a PNG; filetype names it image/apng, the bus calls it image/png.
_MIME_ALIASES = {"image/apng": "image/png"}
ALLOWED_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})

# Room left in a stored name for a "-NNN" suffix within the 255-byte name limit.
_MAX_NAME_BYTES = 200
_MAX_SUFFIX = 1000


@dataclass(frozen=True)
class Picture:
    """One picture's bytes with its (sanitised) base name and sniffed type."""

    name: str
    content_type: str
    data: bytes
    size: int
    sha256: str

    def ref(self) -> FileRef:
        """The wire reference a message carries for this picture."""
        return FileRef(
            name=self.name, content_type=self.content_type, size=self.size, sha256=self.sha256
        )


def safe_name(name: str) -> str:
    """Return ``name`` made safe as one file name: no separators, controls or leading dots."""
    cleaned = "".join(
        "_" if ch in "/\\" or unicodedata.category(ch).startswith("C") else ch for ch in name
    )
    cleaned = cleaned.strip().lstrip(".").strip()
    if not cleaned:
        cleaned = "picture"
    if len(cleaned.encode("utf-8")) > _MAX_NAME_BYTES:
        stem, ext = os.path.splitext(cleaned)
        if len(ext.encode("utf-8")) > 16:
            stem, ext = cleaned, ""
        budget = _MAX_NAME_BYTES - len(ext.encode("utf-8"))
        stem = stem.encode("utf-8")[:budget].decode("utf-8", "ignore")
        cleaned = stem + ext
    return cleaned


def _refuse(path: str, code: str, why: str) -> BadInput:
    return BadInput(f"picture {path!r}: {why}", code=code, path=path)


def _sniff(data: bytes) -> str | None:
    import filetype

    kind = filetype.guess(data)
    if kind is None:
        return None
    mime = _MIME_ALIASES.get(kind.mime, kind.mime)
    if mime not in ALLOWED_TYPES:
        return None
    if mime == "image/webp":
        ok = data[:4] == b"RIFF" and data[8:12] == b"WEBP"
    else:
        ok = data.startswith(_SIGNATURES[mime])
    return mime if ok else None


def sniff(data: bytes) -> str | None:
    """The picture type of ``data`` from its bytes (PNG, JPEG, GIF or WebP), else None."""
    return _sniff(data)


def _inside(root_real: str, real: str) -> bool:
    return real == root_real or os.path.commonpath([root_real, real]) == root_real


_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
# O_NONBLOCK keeps a FIFO swapped in from hanging the open.
_FILE_FLAGS = os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


def _open_beneath(root_real: str, rel: str) -> int:
    """Open ``rel`` (a resolved path inside the root) one component at a time from the
    root's descriptor, following no link at any component: a directory swapped for a
    symlink after the path was resolved makes the open fail instead of leaving the root.
    """
    parts = [p for p in rel.split(os.sep) if p not in ("", ".")]
    if not parts or ".." in parts:
        raise OSError(errno.EINVAL, "not a path beneath the root")
    fd = os.open(root_real, _DIR_FLAGS | _NOFOLLOW)
    try:
        for part in parts[:-1]:
            nxt = os.open(part, _DIR_FLAGS | _NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nxt
        return os.open(parts[-1], _FILE_FLAGS, dir_fd=fd)
    finally:
        os.close(fd)


def _check_image(path: str, data: bytes) -> None:
    """Decode the header and verify the file with Pillow: a PNG signature over a script
    is refused, and so are declared dimensions past Pillow's decompression-bomb bound."""
    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as img:
                width, height = img.size
                if width * height > MAX_PIXELS:
                    raise _refuse(
                        path,
                        "picture_too_large",
                        f"declares {width}x{height} pixels, over the {MAX_PIXELS}-pixel bound",
                    )
                img.verify()
    except BadInput:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise _refuse(path, "picture_too_large", "declares too many pixels") from exc
    except Exception as exc:  # Pillow raises many kinds for a broken file
        raise _refuse(path, "not_a_picture", f"is not a valid picture ({exc})") from exc


def _read_one(path: str, root_real: str, max_bytes: int) -> Picture:
    if not isinstance(path, str) or not path.strip() or "\x00" in path:
        raise _refuse(str(path), "picture_path_invalid", "not a usable path")
    candidate = path if os.path.isabs(path) else os.path.join(root_real, path)
    # realpath resolves links inside the root (allowed when they stay inside); the open
    # below then walks the resolved path without following any link, so a swap made
    # after this check cannot lead outside.
    try:
        real = os.path.realpath(candidate)
    except OSError as exc:  # a link removed while realpath read it
        raise _refuse(path, "picture_unreadable", "changed while being read") from exc
    if not _inside(root_real, real):
        raise _refuse(path, "picture_outside_root", "is outside the allowed root")
    if real == root_real:
        raise _refuse(path, "picture_not_a_file", "is a directory")
    try:
        fd = _open_beneath(root_real, os.path.relpath(real, root_real))
    except FileNotFoundError as exc:
        raise _refuse(path, "picture_not_found", "no such file") from exc
    except IsADirectoryError as exc:
        raise _refuse(path, "picture_not_a_file", "is a directory") from exc
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EINVAL):
            raise _refuse(path, "picture_unreadable", "changed while being read") from exc
        raise _refuse(path, "picture_unreadable", f"cannot be read ({exc.strerror})") from exc
    # What was opened is checked, not the path.
    fst = os.fstat(fd)
    if not stat.S_ISREG(fst.st_mode):
        os.close(fd)
        what = "is a directory" if stat.S_ISDIR(fst.st_mode) else "is not a regular file"
        raise _refuse(path, "picture_not_a_file", what)
    with os.fdopen(fd, "rb") as fh:
        if fst.st_size > max_bytes:
            raise _refuse(
                path,
                "picture_too_large",
                f"is {fst.st_size} bytes, over the {max_bytes}-byte bound",
            )
        # The size can grow after fstat; reading one byte past the bound detects it.
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise _refuse(path, "picture_too_large", f"is over the {max_bytes}-byte bound")
    mime = _sniff(data)
    if mime is None:
        raise _refuse(path, "not_a_picture", "is not a PNG, JPEG, GIF or WebP picture")
    _check_image(path, data)
    return Picture(
        name=safe_name(os.path.basename(path)),
        content_type=mime,
        data=data,
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
    )


def read_pictures(
    paths: list[str], root: Path, *, max_bytes: int = MAX_PICTURE_BYTES
) -> list[Picture]:
    """Read and check every picture under ``root``; raise :class:`BadInput` if any fails.

    Relative paths are taken from ``root``; absolute paths must lie inside it once
    symlinks are resolved. Nothing is returned unless every picture passes.
    """
    if isinstance(paths, str):
        raise BadInput("paths must be a list of paths, not one string", code="picture_path_invalid")
    if len(paths) > MAX_PICTURES:
        raise BadInput(
            f"at most {MAX_PICTURES} pictures, got {len(paths)}",
            code="too_many_pictures",
            count=len(paths),
        )
    if max_bytes < 0:
        raise BadInput(f"max_bytes must be >= 0, got {max_bytes}", code="bad_input")
    root_real = os.path.realpath(root)
    if not os.path.isdir(root_real):
        raise BadInput(
            f"picture root {str(root)!r} is not a directory", code="picture_root_missing"
        )
    return [_read_one(p, root_real, max_bytes) for p in paths]


def _same_content(path: Path, pic: Picture) -> bool:
    try:
        fd = os.open(
            path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        )
    except OSError:
        return False
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            return False
        return fh.read(pic.size + 1) == pic.data


def store_picture(dir: Path, pic: Picture) -> Path:
    """Write ``pic`` under ``dir`` by its sanitised base name and return the path.

    A same-named file with the same bytes is reused; one with other bytes gets the name
    suffixed ``-2``, ``-3``, ... before the extension. ``dir`` is 0700 and files 0600.
    """
    dir = Path(dir)
    dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(dir, 0o700)
    name = safe_name(pic.name)
    stem, ext = os.path.splitext(name)
    # Write to a private temp file, then hard-link it into place: link never overwrites,
    # so concurrent writers cannot clobber each other and no half-written file is visible.
    fd, tmp = tempfile.mkstemp(dir=dir, prefix=".tmp-")  # mkstemp creates it 0600
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(pic.data)
            fh.flush()
            os.fsync(fh.fileno())
        for n in range(1, _MAX_SUFFIX + 1):
            target = dir / (name if n == 1 else f"{stem}-{n}{ext}")
            try:
                os.link(tmp, target)
            except FileExistsError:
                if _same_content(target, pic):
                    return target
                continue
            return target
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    raise Refused(
        f"too many different files named {name!r} in {str(dir)!r}", code="picture_name_exhausted"
    )
