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
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


from bench.burst import (
    STARTED,
    BenchError,
    bench_settings,
    celery_bus,
    close_bus,
    delete_prefix,
    pick_redis,
)
from bench.swarm import Ears, open_running, percentiles, wire
from bus.api import Bus
from bus.delivery.kick_list import KickLoop
from tests.support.trips import SCRIPTS, Trips, between, script_names
from workers.tasks import KICK_THREADS, METRICS_FLUSH_S


def worker_side(sent: list[tuple[float, str, list[str]]]) -> tuple[int, int]:
    """(round trips, script calls) of the worker's delivery threads (``kick-N``) in ``sent``."""
    mine = [names for _t, thread, names in sent if thread.startswith("kick-")]
    return len(mine), sum(1 for names in mine for n in names if n.split(":")[0] in SCRIPTS)


def measure(
    url: str,
    count: int = 200,
    rate: float = 100.0,
    *,
    from_session: bool = False,
    own_server: bool = False,
) -> tuple[dict[str, Any], list[str]]:
    """Lone messages through a worker's delivery loops in this process: the figures, and
    the commands of one message's path (the median one)."""
    trips = Trips()
    with ExitStack() as stack:
        tmp = Path(tempfile.mkdtemp(prefix="lone-trips-"))
        stack.callback(shutil.rmtree, tmp, True)
        prefix = f"lt{uuid.uuid4().hex[:8]}"
        s = bench_settings(tmp / "home", url, prefix, own_server=own_server)
        stack.callback(delete_prefix, url, prefix)
        # As a worker process builds its Bus (workers.tasks.get_bus): counters held and
        # written once a second, off the delivery's round trips.
        worker_bus = Bus(replace(s, metrics_flush_s=METRICS_FLUSH_S))
        loop = KickLoop(worker_bus.delivery, threads=KICK_THREADS).start()
        stack.callback(loop.stop)
        observer = Bus(s)
        open_running(observer, ["lat", "snd"] if from_session else ["lat"])
        ears = Ears(observer, ["lat"])
        stack.callback(ears.stop)
        sender = celery_bus(s)
        stack.callback(close_bus, sender)
        for w in range(5):  # warm: connections, scripts, the loop alive
            ears.reset(1)
            sender.send(wire(w, 1, "lat", "warm"))
            ears.done.wait(10)
        trips.install()
        stack.callback(trips.uninstall)
        sent_at: dict[str, float] = {}
        order: list[str] = []
        ears.reset(count)
        t_next = time.perf_counter()
        for i in range(count):
            m = wire(i, 1, "lat", "lone")
            if from_session:
                m["from_session"] = "snd"
            t_next += 1 / rate
            sent_at[m["id"]] = time.perf_counter()
            order.append(m["id"])
            sender.send(m)
            time.sleep(max(0.0, t_next - time.perf_counter()))
        if not ears.done.wait(60):
            raise BenchError(f"only {len(ears.covered)} of {count} lone messages heard")
        end = time.perf_counter()
        time.sleep(0.2)  # the last message's tail on the worker's side
        with ears.lock:
            heard = dict(ears.seen_at)
        on_path, total, lat, w_trips, w_scripts = [], [], [], [], []
        example: list[str] = []
        for n, mid in enumerate(order):
            t0, t1 = sent_at[mid], heard[mid]
            t_after = sent_at[order[n + 1]] if n + 1 < len(order) else end + 0.2
            path = between(trips, t0, t1)  # the BLMOVE that wakes was sent before t0
            on_path.append(len(path))
            whole = between(trips, t0, t_after)
            total.append(len(whole))
            wt, ws = worker_side(whole)
            w_trips.append(wt)
            w_scripts.append(ws)
            lat.append((t1 - t0) * 1000)
            if n == len(order) // 2:
                example = [
                    f"{(t - t0) * 1000:6.2f} ms {th:12s} {'+'.join(script_names(c, worker_bus))}"
                    for t, th, c in whole
                ]
        return {
            "count": count,
            "rate_per_s": rate,
            "trips_on_path_median": statistics.median(on_path),
            "trips_on_path_p90": sorted(on_path)[int(len(on_path) * 0.9)],
            "trips_per_message_median": statistics.median(total),
            # The worker's delivery threads, from the send to the next send: every round
            # trip (a pipeline is one) and script call they made for the message.
            "worker_trips_median": statistics.median(w_trips),
            "worker_scripts_median": statistics.median(w_scripts),
            "send_to_heard_ms": percentiles(lat),
        }, example


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
    with ExitStack() as stack:
        tmp = Path(tempfile.mkdtemp(prefix="lone-trips-srv-"))
        stack.callback(shutil.rmtree, tmp, True)
        url, how = pick_redis(args.redis_url, tmp, stack)
        try:
            out, example = measure(
                url,
                args.count,
                args.rate,
                from_session=args.from_session,
                own_server=how == STARTED,
            )
        except BenchError as exc:
            print(str(exc), file=sys.stderr)
            return 1
    print(json.dumps(out, indent=1))
    print("one message's commands, send to the next send:")
    print("\n".join(example))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
