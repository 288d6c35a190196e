"""The embedded Redis keeps short streams small (stream-node-max-bytes, bus/ops/embedded.py)."""

from __future__ import annotations

from pathlib import Path

import redis

from bus.ops.embedded import STREAM_NODE_MAX_BYTES, EmbeddedRedis


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


def test_the_embedded_redis_keeps_a_hash_of_short_records_a_listpack(tmp_path: Path) -> None:
    sock = tmp_path / "r" / "redis.sock"
    with EmbeddedRedis(sock, tmp_path / "r", persist=False):
        c = redis.Redis(unix_socket_path=str(sock), decode_responses=True)
        try:
            # An inbox record or a send answer (~300-600 B): not a table of ~1 KB more.
            c.hset("h", mapping={"key": "from:x", "one_m": "x" * 600})
            assert c.object("encoding", "h") in ("ziplist", "listpack")
            c.hset("h", "big", "x" * 2000)
            assert c.object("encoding", "h") == "hashtable"
        finally:
            c.close()


def test_a_free_port_lies_outside_the_ephemeral_range_and_binds() -> None:
    # A server restarted on its port must not find it taken by a client's outgoing
    # connection (or a client's self-connect while reconnecting to it).
    import socket

    from tests.support.local_servers import ephemeral_range, free_port

    low, high = ephemeral_range()
    for _ in range(20):
        port = free_port()
        assert not low <= port <= high
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))
