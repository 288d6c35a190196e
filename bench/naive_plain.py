"""The sparse-traffic baseline of ``bench/cost.py``: a plain Celery app, nothing of the bus's
worker loaded (no delivery loops, no heartbeats), one task per message writing its line
as the bus writes a line (``Floor.write_line``: the session's socket if its listener acks,
else its JSONL file). ``bench/naive.py`` is the same task on the bus's own app, for the
burst rows where the bus's worker runs anyway.

    celery -A bench.naive_plain worker -Q naive -c 2   (INBOX_HOME, INBOX_BROKER_URL)
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from celery import Celery

from bus.delivery.floor import Floor

app = Celery("naive", broker=os.environ.get("INBOX_BROKER_URL", "redis://127.0.0.1:6379/0"))
app.conf.update(task_ignore_result=True, worker_hijack_root_logger=False)


@lru_cache(maxsize=1)
def _floor() -> Floor:
    return Floor(Path(os.environ["INBOX_HOME"]))


@app.task(name="bench.naive_plain")
def naive_plain(sid: str, msg: dict[str, Any]) -> str:
    """One message, one line: the socket if a listener acks, else the file."""
    via, _path = _floor().write_line(sid, msg)
    return via
