"""Round trips and time of the store's batches on a Redis Cluster (``OrderedBatch``).

On a 3-master embedded cluster (bench/local_servers.py), two batches:

- ``mixed``: one ``store.pipeline()`` holding, for each of ``--sessions`` sessions, a
  script call (``extend_lock.lua``), a ``SET`` and a ``GET`` of its keys, as the store's
  ordered batches mix them;
- ``send_many``: ``Bus.send_many`` of ``--messages`` messages to ``--sessions`` receivers
  (its appends, index writes and outbox entries go as one ordered batch).

Every command or pipeline the process sends is counted (``send_packed_command``): the
median round trips and milliseconds per batch over ``--rounds``.

    .venv/bin/python bench/cluster_batch.py [--sessions 30] [--messages 90] [--rounds 20]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis.connection

from bench.local_servers import EmbeddedCluster, free_cluster_ports
from bus.api import Bus
from bus.core.settings import Settings
from bus.delivery.dispatch import RecordingDispatcher


class Trips:
    """How many times this process sent a command or a pipeline."""

    def __init__(self) -> None:
        self.count = 0
        cls = redis.connection.AbstractConnection
        real = cls.send_packed_command

        def counted(conn: Any, command: Any, check_health: bool = True) -> None:
            self.count += 1
            real(conn, command, check_health)

        cls.send_packed_command = counted  # type: ignore[method-assign]


def measure(trips: Trips, rounds: int, run: Callable[[int], None]) -> tuple[float, float]:
    """Median round trips and ms of ``run(n)`` over ``rounds`` (a first, warming call apart)."""
    run(-1)
    counts, times = [], []
    for n in range(rounds):
        before, t0 = trips.count, time.perf_counter()
        run(n)
        times.append((time.perf_counter() - t0) * 1000)
        counts.append(trips.count - before)
    return statistics.median(counts), statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, default=30)
    ap.add_argument("--messages", type=int, default=90)
    ap.add_argument("--rounds", type=int, default=20)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-cluster-batch-"))
    cluster = EmbeddedCluster(tmp / "cluster", free_cluster_ports(3)).start()
    trips = Trips()
    try:
        settings = Settings(
            home=tmp / "home",
            host="hosta",
            redis_url=cluster.url,
            broker_url=cluster.url,
            redis_cluster=True,
            key_prefix=f"b{uuid.uuid4().hex[:8]}",
            send_rate=0,
            max_unread=0,
            memory_settings=False,
        )
        bus = Bus(settings, dispatcher=RecordingDispatcher())
        store = bus.store
        sids = [f"s{i}" for i in range(a.sessions)]
        for sid in sids:
            bus.open_session(sid)

        def mixed(_n: int) -> None:
            pipe = store.pipeline()
            for sid in sids:
                store.run("extend_lock", sid, ("lock",), ["nobody", 1000], client=pipe)
                pipe.set(store.k.s(sid, "cursor"), "5-0")
                pipe.get(store.k.s(sid, "cursor"))
            pipe.execute()

        def send(n: int) -> None:
            bus.send_many(
                [
                    {
                        "id": f"r{n}-{i}",
                        "from": "hosta:alice",
                        "from_session": "alice",
                        "to_id": sids[i % len(sids)],
                        "text": f"message {i}",
                    }
                    for i in range(a.messages)
                ]
            )

        for name, run in (("mixed", mixed), ("send_many", send)):
            count, ms = measure(trips, a.rounds, run)
            print(f"{name:10} sessions={a.sessions} round_trips={count:g} ms={ms:.2f}")
    finally:
        cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
