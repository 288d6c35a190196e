"""Baseline for ``bench/burst.py``: a plain Celery task per message.

What a swarm does without the inbox: every agent message is its own task and lands on
the session's floor as its own line, so a harness takes each one as a turn of its own.
The bench worker loads this module with ``-I bench.naive`` (same app, same queues).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from bus.core.settings import Settings
from bus.delivery.floor import Floor
from workers.app import app


@lru_cache(maxsize=1)
def _floor() -> Floor:
    return Floor(Settings.from_env().home)


@app.task(name="bench.naive_deliver")
def naive_deliver(sid: str, msg: dict[str, Any]) -> str:
    """Write one message as one line: local precedence (socket, else the file)."""
    via, _path = _floor().write_line(sid, msg)
    return via
