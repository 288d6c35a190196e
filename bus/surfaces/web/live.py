"""The operator's sessions page, live: every session's messages and rows as server-sent
events (``GET /ui/sessions/events``), resumed after a reconnect by ``Last-Event-ID``."""

from __future__ import annotations

import asyncio
import json
import queue
import re
import threading
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool

if TYPE_CHECKING:
    from bus.api import Bus

# How often the live page gets fresh rows when no message arrives (states, turns).
ROWS_EVERY_S = 5.0
# One live response lasts this long; the browser reconnects at once, resuming from its
# Last-Event-ID. A gateway stopping waits for open responses, so this bounds the wait.
STREAM_LIFETIME_S = 25.0
_STREAM_ID = re.compile(r"^[0-9]{1,20}-[0-9]{1,20}$")


def _event(name: str, data: Any) -> str:
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


def _later(a: str, b: str) -> str:
    """The later of two stream ids."""
    return max(a, b, key=lambda x: tuple(int(p) for p in x.split("-")))


async def live(
    bus: Bus, last_event_id: str | None, lifetime_s: float | None = None
) -> AsyncIterator[str]:
    """Follow every session's stream in a thread; emit each message and the rows.

    Every batch ends with a ``rows`` event whose ``id`` is the newest stream id sent, so
    a reconnecting browser (``Last-Event-ID``) resumes after it: nothing sent between two
    responses is lost. A first connection starts at the store's clock, "now".
    """
    if last_event_id and _STREAM_ID.fullmatch(last_event_id):
        since = last_event_id
    else:
        since = f"{await run_in_threadpool(bus.store.server_time_ms)}-0"
    stop = threading.Event()
    found: queue.Queue[dict[str, Any]] = queue.Queue(maxsize=10_000)
    # Positions are taken now, before the first event goes out: nothing sent after the
    # page's "live" mark is missed.
    sub = await run_in_threadpool(
        lambda: bus.subscribe(None, block_ms=500, stop=stop, refresh_s=1.0, since=since)
    )

    def pump() -> None:
        try:
            for ev in sub:
                found.put(ev)
        except Exception as exc:  # a reader thread must not die silently, nor noisily
            if not stop.is_set():  # once stopped, its connection may close under it
                found.put({"error": str(exc)})

    async def rows(position: str) -> str:
        fresh = await run_in_threadpool(bus.watch.top_rows)
        return f"id: {position}\n" + _event("rows", {"rows": fresh})

    threading.Thread(target=pump, name="ui-live", daemon=True).start()
    ends = time.monotonic() + (STREAM_LIFETIME_S if lifetime_s is None else lifetime_s)
    position = since
    try:
        yield "retry: 1000\n\n"
        yield await rows(position)
        while time.monotonic() < ends:
            try:
                ev = await asyncio.to_thread(found.get, True, ROWS_EVERY_S)
            except queue.Empty:
                yield await rows(position)
                continue
            batch = [ev]
            while not found.empty() and len(batch) < 100:
                batch.append(found.get_nowait())
            for one in batch:
                if "error" in one:
                    yield _event("trouble", {"message": one["error"]})
                    return
                msg = one["message"]
                position = _later(position, one["stream_id"])
                yield _event(
                    "message",
                    {
                        "session": one["session"],
                        "from": str(msg.get("from", "")),
                        "kind": str(msg.get("kind", "message")),
                        "text": str(msg.get("text", ""))[:300],
                        "at": msg.get("ts"),
                    },
                )
            yield await rows(position)
    finally:
        stop.set()
