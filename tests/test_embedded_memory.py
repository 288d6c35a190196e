"""The embedded Redis keeps short streams small (stream-node-max-bytes, bus/embedded.py)."""

from __future__ import annotations

from pathlib import Path

import redis

from bus.embedded import STREAM_NODE_MAX_BYTES, EmbeddedRedis


def test_the_embedded_redis_allocates_small_stream_nodes(tmp_path: Path) -> None:
    sock = tmp_path / "r" / "redis.sock"
    with EmbeddedRedis(sock, tmp_path / "r", persist=False):
        c = redis.Redis(unix_socket_path=str(sock), decode_responses=True)
        try:
            assert c.config_get("stream-node-max-bytes") == {
                "stream-node-max-bytes": str(STREAM_NODE_MAX_BYTES)
            }
            c.xadd("s", {"id": "m1", "m": "x" * 200})
            # One short entry: the node is allocated at the configured size, not at 4 KB.
            usage = c.memory_usage("s")
            assert usage is not None and usage < 4096
        finally:
            c.close()
