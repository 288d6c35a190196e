"""Redis calls of one lanes lookup (bus/services/durable_watch.py ``lanes``), as a durable
watch of a coordinator's lanes makes every ``refresh_s`` (3 s).

On an embedded standalone server and a 3-master embedded cluster (bench/local_servers.py),
``--sessions`` sessions of which ``--lanes`` are the coordinator's: the round trips and
commands one lookup sends (``send_packed_command``, after a first lookup), and the
commands a second that makes at ``refresh_s=3``.

    .venv/bin/python bench/lanes_lookup.py [--sessions 1010] [--lanes 10]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis
import redis.connection

from bench.local_servers import EmbeddedCluster, free_cluster_ports, free_port
from bus.core.models import SessionInfo
from bus.ops.embedded import EmbeddedRedis
from bus.services.durable_watch import lanes
from bus.store.cluster import cluster_client
from bus.store.keys import Keys
from bus.store.store import Store

REFRESH_S = 3.0


def commands_in(packed: Any) -> int:
    """How many commands a packed buffer holds (RESP arrays of bulk strings)."""
    data = b"".join(bytes(c) for c in (packed if isinstance(packed, list) else [packed]))
    lines, n, count = data.split(b"\r\n"), 0, 0
    while n < len(lines):
        if lines[n].startswith(b"*") and n + 1 < len(lines) and lines[n + 1].startswith(b"$"):
            count += 1
            n += 1 + 2 * int(lines[n][1:])
        else:
            n += 1
    return count


@contextmanager
def counting() -> Iterator[list[int]]:
    """Each command or pipeline sent while inside: its command count."""
    sent: list[int] = []
    cls = redis.connection.AbstractConnection
    real = cls.send_packed_command

    def counted(conn: Any, command: Any, check_health: bool = True) -> None:
        sent.append(commands_in(command))
        real(conn, command, check_health)

    cls.send_packed_command = counted  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        cls.send_packed_command = real  # type: ignore[method-assign]


def measure(store: Store, sessions: int, lane_count: int) -> tuple[int, int]:
    store.put_session(SessionInfo(session="coord", handle="hosta:coord", host="hosta"))
    for n in range(sessions - 1):
        parent = "coord" if n < lane_count else ("elsewhere" if n % 3 == 0 else None)
        sid = f"s{n}"
        store.put_session(
            SessionInfo(session=sid, handle=f"hosta:{sid}", host="hosta", parent=parent)
        )
    found = lanes(store, "coord")  # a first lookup: connections made
    assert len(found) == lane_count, found
    with counting() as sent:
        lanes(store, "coord")
    return len(sent), sum(sent)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, default=1010)
    ap.add_argument("--lanes", type=int, default=10)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-lanes-"))
    try:
        with EmbeddedRedis(tmp / "r.sock", tmp / "data", port=free_port(), persist=False) as one:
            client = redis.Redis.from_url(one.tcp_url, decode_responses=True)
            trips, cmds = measure(
                Store(client, Keys(f"b{uuid.uuid4().hex[:6]}")), a.sessions, a.lanes
            )
            print(
                f"standalone sessions={a.sessions} lanes={a.lanes} round_trips={trips} "
                f"commands={cmds} commands_per_s={cmds / REFRESH_S:.1f}"
            )
        cluster = EmbeddedCluster(tmp / "cluster", free_cluster_ports(3)).start()
        try:
            store = Store(cluster_client(cluster.url), Keys(f"b{uuid.uuid4().hex[:6]}"))
            trips, cmds = measure(store, a.sessions, a.lanes)
            print(
                f"cluster    sessions={a.sessions} lanes={a.lanes} round_trips={trips} "
                f"commands={cmds} commands_per_s={cmds / REFRESH_S:.1f}"
            )
        finally:
            cluster.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
