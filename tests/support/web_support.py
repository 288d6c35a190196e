"""Helpers for the web inbox's browser tests: a real gateway on a free port, the CLI as a
child process, and a picture worth looking at in a screenshot."""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path
from typing import Any

import uvicorn

from bus.api import Bus
from bus.core.settings import SOURCE_ROOT, Settings
from bus.surfaces.http.gateway import create_app

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts" / "web"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Served:
    """``inbox serve``'s app under uvicorn in a thread, on ``port``; stop() ends it."""

    def __init__(self, bus: Bus, port: int) -> None:
        config = uvicorn.Config(
            create_app(bus),
            host="127.0.0.1",
            port=port,
            log_level="warning",
            timeout_graceful_shutdown=2,
        )
        self.server = uvicorn.Server(config)
        self.base = f"http://127.0.0.1:{port}"
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the gateway did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def cli(s: Settings, *args: str, token: str | None = None) -> dict[str, Any]:
    """Run ``inbox ARGS`` as a child with ``s``'s environment; its JSON answer."""
    env = s.child_env()
    if token:
        env["INBOX_TOKEN"] = token
    done = subprocess.run(
        [sys.executable, "-m", "bus.surfaces.cli.app", *args],
        env=env,
        cwd=str(SOURCE_ROOT),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, f"inbox {' '.join(args)}: {done.stderr}{done.stdout}"
    return dict(json.loads(done.stdout.splitlines()[-1]))


def _chunk(kind: bytes, data: bytes) -> bytes:
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)


def chart_png(width: int = 480, height: int = 240) -> bytes:
    """A real RGB PNG (a bar chart on white), so screenshots show the picture."""
    bars = [0.35, 0.6, 0.45, 0.8, 0.7, 0.9]
    rows = []
    for y in range(height):
        row = bytearray(b"\x00")  # filter: none
        for x in range(width):
            slot, inside = divmod(x * len(bars), width)
            top = height - int(bars[slot] * (height - 20))
            in_bar = inside > width // 6 and y >= top and y < height - 6
            row += (
                b"\x1f\x6f\xeb"
                if in_bar
                else (b"\xdd\xe2\xe7" if y >= height - 6 else b"\xff\xff\xff")
            )
        rows.append(bytes(row))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", ihdr)
        + _chunk(b"IDAT", zlib.compress(b"".join(rows), 9))
        + _chunk(b"IEND", b"")
    )
