"""Small real pictures for the tests: a hand-built PNG, and pictures Pillow encodes (the bus
verifies pictures with Pillow)."""

from __future__ import annotations

import io
import struct
import zlib

from PIL import Image


def png_chunk(kind: bytes, body: bytes) -> bytes:
    """One PNG chunk: length, kind, body and its CRC."""
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png_bytes() -> bytes:
    """A complete 1x1 RGB PNG."""
    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\x00\xff\x00\x00")
    return (
        b"\x89PNG\r\n\x1a\n"
        + png_chunk(b"IHDR", ihdr)
        + png_chunk(b"IDAT", idat)
        + png_chunk(b"IEND", b"")
    )


def encoded(fmt: str, color: tuple[int, int, int] = (0, 128, 255)) -> bytes:
    """A real 2x2 picture of one colour in ``fmt``, made by Pillow."""
    out = io.BytesIO()
    Image.new("RGB", (2, 2), color).save(out, format=fmt)
    return out.getvalue()


def png(color: tuple[int, int, int] = (0, 128, 255)) -> bytes:
    """A real 2x2 PNG of one colour."""
    return encoded("PNG", color)


JPEG = encoded("JPEG")
