"""The ``inbox`` command line run as a user runs it: a child process, its output as text."""

from __future__ import annotations

import subprocess
import sys

from bus.core.settings import Settings

FULL = "bus.surfaces.cli.app"  # the full command line (Typer), no fast lane
ENTRY = "bus"  # what the installed ``inbox`` script runs: the fast lanes first


def inbox(
    env: dict[str, str],
    *args: str,
    stdin: str | None = None,
    module: str = FULL,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """``inbox ARGS`` as a child with exactly this environment; its exit code and output."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def inbox_as(
    s: Settings, *args: str, stdin: str | None = None, module: str = FULL, **env: str
) -> subprocess.CompletedProcess[str]:
    """``inbox ARGS`` as a child on these settings with no dispatcher (a send is stored and
    nothing delivered), ``env`` on top; its exit code and output."""
    return inbox(
        {**s.child_env(), "INBOX_DISPATCHER": "none", **env}, *args, stdin=stdin, module=module
    )


def inbox_entry(
    s: Settings, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``inbox ARGS`` through the installed script's entry point on these settings, no
    dispatcher, a send through the library's path (``INBOX_FAST_SEND=0``, not the send lane)."""
    return inbox_as(s, *args, stdin=stdin, module=ENTRY, INBOX_FAST_SEND="0")
