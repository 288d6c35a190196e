"""The gateway this home runs: ``inbox serve`` keeps where it listens in
``$INBOX_HOME/serve.json`` (0600) while it runs, and takes it away when it stops, so
``inbox doctor`` knows there is a gateway to ask (bus.ops.doctor_reach). A record left
by a gateway that was killed says one ran here and is gone."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bus.local.private_files import write_private

RECORD = "serve.json"
# What a client dials for a gateway bound to every address.
_DIAL = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


def url_of(host: str, port: int) -> str:
    """The URL a client on this machine reaches a gateway bound to ``host:port`` at. Pure."""
    dial = _DIAL.get(host, host)
    return f"http://[{dial}]:{port}" if ":" in dial else f"http://{dial}:{port}"


def _stop(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def served(home: Path, host: str, port: int) -> Iterator[None]:
    """Keep this process's gateway on record while the block runs. A SIGTERM ends the
    block as an exit (status 143): uvicorn, stopped by one, raises it again once it has
    shut down, and the default action would end the process before the record is taken
    away."""
    path = home / RECORD
    record = {"url": url_of(host, port), "pid": os.getpid(), "started": int(time.time())}
    home.mkdir(parents=True, exist_ok=True)
    write_private(path, json.dumps(record) + "\n")
    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        if (recorded(home) or {}).get("pid") == os.getpid():  # not a later gateway's
            path.unlink(missing_ok=True)


def recorded(home: Path) -> dict[str, Any] | None:
    """The gateway record of ``home`` (``url``, ``pid``, ``started``), or ``None``."""
    try:
        data = json.loads((home / RECORD).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("url"), str) else None


__all__ = ["RECORD", "recorded", "served", "url_of"]
