"""Redis restarting with persistence: every message is delivered once or still pending."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis

from bus.api import Bus
from bus.core.settings import Settings
from bus.delivery.dispatch import RecordingDispatcher
from bus.ops.embedded import EmbeddedRedis

pytestmark = pytest.mark.slow


def test_a_redis_restart_keeps_queues_marks_schedule_and_threads(tmp_path: Path) -> None:
    sock = tmp_path / "r" / "redis.sock"
    data = tmp_path / "r" / "data"
    server = EmbeddedRedis(sock, data).start()
    s = Settings(
        home=tmp_path / "home",
        host="h",
        redis_url=server.url,
        key_prefix="dur",
        wake_debounce_s=0.2,
    )
    try:
        b = Bus(s, dispatcher=RecordingDispatcher())
        b.open_session("coord")
        b.turn("coord", "start")
        first = [b.send({"from": "h:x", "to_id": "coord", "text": f"a{i}"})["id"] for i in range(5)]
        b.deliver_session("coord")  # a notice on the floor, not yet drained
        queued = [
            b.send({"from": "h:x", "to_id": "coord", "text": f"b{i}"})["id"] for i in range(5)
        ]  # stored, not yet taken by a delivery
        b.open_session("idle")
        b.send({"from": "h:x", "to_id": "idle", "text": "wake me", "class": "blocker"})
        b.deliver_session("idle")  # a wake on the schedule
        b.store.r.close()
        server.stop()  # SIGTERM: redis flushes its append-only file

        server = EmbeddedRedis(sock, data).start()
        b = Bus(s, dispatcher=RecordingDispatcher())
        again = b.send({"from": "h:x", "to_id": "coord", "text": "a0", "id": first[0]})
        assert again["duplicate"] is True  # idempotence survived
        b.deliver_session("coord")
        lines = b.drain("coord")
        assert isinstance(lines, list)
        carried = [m for ln in lines for m in ln["notice"]["messages"]]
        assert sorted(carried) == sorted(first + queued)  # each once, none lost
        raw = b.store.r.hgetall(b.store.k.s("coord", "msgs"))
        assert {json.loads(v)["mark"] for v in raw.values()} == {"noticed"}
        assert b.store.next_due() is not None  # the pending wake is still scheduled
        [row] = b.threads("coord")["threads"]
        assert row["count"] == 10
    finally:
        server.stop()


def test_the_embedded_server_runs_with_append_only_persistence(tmp_path: Path) -> None:
    with EmbeddedRedis(tmp_path / "s.sock", tmp_path / "d") as server:
        client = redis.Redis(unix_socket_path=str(server.socket_path), decode_responses=True)
        assert client.config_get("appendonly")["appendonly"] == "yes"
        assert client.info("server")["redis_version"].startswith(("6.2", "7"))
        client.close()
