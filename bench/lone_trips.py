"""Round trips on the send → notice path of a lone message (the latency row of swarm.py).

In one process: a worker's delivery loops (``KickLoop``, the kick list, as many threads as a
worker runs), a listener that acks on the session's socket, and a sender sending one
message at a time (``--rate`` a second). Every command or pipeline sent to Redis is
counted (``send_packed_command``) with its time and thread: the ones sent between a
message's send and the moment its notice is heard are its round trips on the path, a
count that holds on a loaded machine where the milliseconds do not. Prints the median
on-path and total (send to the next send) round trips per message, the commands of one
message's path, and send → heard p50 / p99 ms (wall clock: noisy on a shared box).

    .venv/bin/python bench/lone_trips.py --count 200
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis.connection

from bench.burst import (
    STARTED,
    bench_settings,
    celery_bus,
    close_bus,
    delete_prefix,
    pick_redis,
)
from bench.swarm import Ears, open_running, percentiles, wire
from bus.api import Bus
from bus.delivery.kick_list import KickLoop
from workers.tasks import KICK_THREADS


class Trips:
    """Every command or pipeline this process sends: (perf_counter, thread, names)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sent: list[tuple[float, str, list[str]]] = []

    def record(self, command: Any) -> None:
        chunks = command if isinstance(command, list) else [command]
        parts = b"".join(bytes(c) for c in chunks).split(b"\r\n")
        names = []
        for i, part in enumerate(parts):
            if part.startswith(b"*") and i + 2 < len(parts) and parts[i + 1].startswith(b"$"):
                name = parts[i + 2].upper().decode(errors="replace")
                if name == "EVALSHA" and i + 4 < len(parts):  # the script's sha, named later
                    name += ":" + parts[i + 4].decode(errors="replace")
                names.append(name)
        entry = (time.perf_counter(), threading.current_thread().name, names)
        with self.lock:
            self.sent.append(entry)

    def install(self) -> None:
        real = redis.connection.AbstractConnection.send_packed_command
        trips = self

        def counting(conn: Any, command: Any, check_health: bool = True) -> None:
            trips.record(command)
            real(conn, command, check_health)

        redis.connection.AbstractConnection.send_packed_command = counting  # type: ignore[method-assign]


def script_names(commands: list[str], bus: Bus) -> list[str]:
    """``EVALSHA:<sha>`` as ``EVALSHA:<script name>`` (the scripts the store loaded)."""
    names = {script.sha: name for name, script in bus.store._scripts.items()}
    out = []
    for c in commands:
        head, _, sha = c.partition(":")
        out.append(f"{head}:{names.get(sha, sha[:8])}" if sha else c)
    return out


def between(trips: Trips, start: float, end: float) -> list[tuple[float, str, list[str]]]:
    with trips.lock:
        return [t for t in trips.sent if start <= t[0] < end]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--redis-url", default=None)
    parser.add_argument(
        "--from-session",
        action="store_true",
        help="the sender names its session (an agent's send), not a bare handle",
    )
    args = parser.parse_args(argv)
    trips = Trips()
    with ExitStack() as stack:
        tmp = Path(tempfile.mkdtemp(prefix="lone-trips-"))
        url, how = pick_redis(args.redis_url, tmp, stack)
        prefix = f"lt{uuid.uuid4().hex[:8]}"
        s = bench_settings(tmp / "home", url, prefix, own_server=how == STARTED)
        stack.callback(delete_prefix, url, prefix)
        worker_bus = Bus(s)
        loop = KickLoop(worker_bus.delivery, threads=KICK_THREADS).start()
        stack.callback(loop.stop)
        observer = Bus(s)
        open_running(observer, ["lat", "snd"] if args.from_session else ["lat"])
        ears = Ears(observer, ["lat"])
        stack.callback(ears.stop)
        sender = celery_bus(s)
        stack.callback(close_bus, sender)
        for w in range(5):  # warm: connections, scripts, the loop alive
            ears.reset(1)
            sender.send(wire(w, 1, "lat", "warm"))
            ears.done.wait(10)
        trips.install()
        sent_at: dict[str, float] = {}
        order: list[str] = []
        ears.reset(args.count)
        t_next = time.perf_counter()
        for i in range(args.count):
            m = wire(i, 1, "lat", "lone")
            if args.from_session:
                m["from_session"] = "snd"
            t_next += 1 / args.rate
            sent_at[m["id"]] = time.perf_counter()
            order.append(m["id"])
            sender.send(m)
            time.sleep(max(0.0, t_next - time.perf_counter()))
        if not ears.done.wait(60):
            print(f"only {len(ears.covered)} of {args.count} heard", file=sys.stderr)
            return 1
        end = time.perf_counter()
        with ears.lock:
            heard = dict(ears.seen_at)
        on_path, total, lat = [], [], []
        example: list[str] = []
        for n, mid in enumerate(order):
            t0, t1 = sent_at[mid], heard[mid]
            t_after = sent_at[order[n + 1]] if n + 1 < len(order) else end
            path = between(trips, t0, t1)  # the BLMOVE that wakes was sent before t0
            on_path.append(len(path))
            total.append(len(between(trips, t0, t_after)))
            lat.append((t1 - t0) * 1000)
            if n == len(order) // 2:
                example = [
                    f"{(t - t0) * 1000:6.2f} ms {th:12s} {'+'.join(script_names(c, worker_bus))}"
                    for t, th, c in path
                ]
        out = {
            "count": args.count,
            "rate_per_s": args.rate,
            "trips_on_path_median": statistics.median(on_path),
            "trips_on_path_p90": sorted(on_path)[int(len(on_path) * 0.9)],
            "trips_per_message_median": statistics.median(total),
            "send_to_heard_ms": percentiles(lat),
        }
        print(json.dumps(out, indent=1))
        print("one message's path:")
        print("\n".join(example))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
