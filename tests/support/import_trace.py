"""What an ``inbox`` process imports: run under ``python -X importtime``, whose report on
stderr names every module the process imported."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

INBOX = Path(sys.executable).parent / "inbox"


# Pictures (Pillow, filetype), the HTTP gateway and web pages, the MCP server, Celery.
NEVER = (
    "PIL",
    "filetype",
    "fastapi",
    "starlette",
    "uvicorn",
    "jinja2",
    "mcp",
    "celery",
    "kombu",
    "workers",
    "bus.surfaces.http.gateway",
    "bus.surfaces.mcp_server",
    "bus.surfaces.web",
)


# What the read lane never imports: the library's own stack, and ``typing`` (the modules it
# shares with the library spell ``TYPE_CHECKING`` themselves to keep it so).
LIBRARY = (
    "redis", "pydantic", "typer", "click", "rich", "asyncio", "typing", "bus.api",
    "bus.surfaces.cli",
)  # fmt: skip


IMPORT_LINE = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)$", re.M)


def imported(env: dict[str, str], *argv: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run ``inbox ARGV``; its result and the modules it imported."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", str(INBOX), *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return out, set(IMPORT_LINE.findall(out.stderr))


def heavy(modules: set[str], never: tuple[str, ...] = NEVER) -> list[str]:
    """The modules of ``modules`` that are (or sit under) one of ``never``, sorted."""
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in never))
