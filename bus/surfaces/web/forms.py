"""The web inbox's form input: a text field, an uploaded picture kept bounded."""

from __future__ import annotations

from pathlib import Path

from starlette.datastructures import FormData, UploadFile

from bus.core.errors import BadInput, Refused
from bus.services.pictures import MAX_PICTURE_BYTES, safe_name


def field(form: FormData, name: str) -> str:
    value = form.get(name)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BadInput(f"{name} must be text")
    return value


def read_bounded(path: Path) -> bytes:
    with open(path, "rb") as fh:
        data = fh.read(MAX_PICTURE_BYTES + 1)
    if len(data) > MAX_PICTURE_BYTES:
        raise Refused("the picture is over the size bound", code="picture_too_large")
    return data


async def save_upload(tmp: Path, n: int, upload: UploadFile) -> str:
    """Write one upload into the private temp dir under a safe name, bounded; the bus
    then reads it as it reads any picture (sniffed, bounded, refused whole)."""
    name = safe_name(upload.filename or "picture")
    target = tmp / f"{n}" / name
    target.parent.mkdir()
    data = await upload.read(MAX_PICTURE_BYTES + 1)
    target.write_bytes(data)  # an oversized one is refused by the bus's own bound
    return str(target.relative_to(tmp))
