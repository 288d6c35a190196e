"""``inbox watch --name`` rides through a Redis restart: it says so on stderr, opens its
subscription again at its cursors once Redis answers, and misses nothing."""

from __future__ import annotations

import io
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest
import redis

from bus.api import Bus
from bus.core.settings import Settings
from bus.delivery.dispatch import RecordingDispatcher
from bus.ops.embedded import EmbeddedRedis
from tests.support.local_servers import free_port
from tests.support.waiting import wait_for


def _send(bus: Bus, text: str) -> str:
    def once() -> str | None:
        try:
            return str(bus.send({"from": "hosta:me", "to_id": "lane", "text": text})["id"])
        except redis.RedisError:  # the first command on a dead pooled connection
            return None

    return str(wait_for(once, 30, f"the send of {text!r}"))


@pytest.mark.slow
def test_a_durable_watch_carries_on_through_a_redis_restart(
    tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    server = EmbeddedRedis(tmp_path / "r.sock", tmp_path / "rdata", port=port).start()
    url = f"redis://:{server.password}@127.0.0.1:{port}/0"
    # Its own standalone server, restarted (also when the suite's store is a cluster).
    s = replace(settings, redis_url=url, broker_url=url, redis_cluster=False)
    bus = Bus(s, dispatcher=RecordingDispatcher())
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    out = io.StringIO()
    stop = threading.Event()
    watcher = threading.Thread(
        target=bus.watch.run_watch,
        args=(["lane"], out),
        kwargs={"name": "coord", "stop": stop, "block_ms": 200},
        daemon=True,
    )
    try:
        bus.open_session("lane")
        watcher.start()
        wait_for(lambda: bus.store.events.sub_cursors("coord", ["lane"])["lane"], 20, "the cursor")
        before = _send(bus, "before")
        wait_for(lambda: before in out.getvalue(), 20, "the line before the restart")
        server.stop()  # graceful: the cursor is in the append-only file
        wait_for(lambda: "Redis unreachable" in err.getvalue(), 20, "the watch's outage line")
        assert watcher.is_alive()
        server.start()
        after = _send(bus, "after")
        wait_for(lambda: after in out.getvalue(), 30, "the line after the restart")
        assert "Redis back after" in err.getvalue() and watcher.is_alive()
        lines = out.getvalue().splitlines()
        assert sum(before in line for line in lines) == 1  # nothing repeated
        assert sum(after in line for line in lines) == 1
    finally:
        stop.set()
        watcher.join(10)
        server.stop()
