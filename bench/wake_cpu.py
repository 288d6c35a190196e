"""CPU and round trips a due wake costs, arrivals and wakes apart (the wake lateness goal).

    python bench/wake_cpu.py [--sessions 500] [--rounds 3] [--threads 1] [--profile FILE]

One thread, its own embedded redis-server: ``--sessions`` idle sessions each get one
blocker (``send_many``, the dispatches recorded), then their arrivals are delivered as
kick loops would (``bus.delivery.engine.deliver_many``, 64 at a time), the plan's clock is moved past
the debounce, the due entries taken (as the scheduler does) and delivered the same way.
Per session and step: this process's CPU, the redis-server's CPU (``/proc``) and the round
trips (writes to the socket: a pipeline is one), and the step's wall time. Median round
(and the best round's Python: steadier on a shared machine).
``--threads N`` delivers the chunks from N threads at once, as a worker process's N kick
loops do (each takes the next chunk); the wall time then shows what the GIL between them
costs. ``--profile`` writes a cProfile of the last round's two steps (one thread only;
``--profile-step`` one of them). ``--commands`` prints the last round's Redis commands a
session, by step (the server's ``INFO commandstats``: script calls and the commands they
ran).
Run two trees interleaved to compare them.
"""

from __future__ import annotations

import argparse
import cProfile
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import redis.connection  # noqa: E402

from bench.ingest_cpu import cpu_s  # noqa: E402
from bus.api import Bus  # noqa: E402
from bus.core.clock import ManualClock  # noqa: E402
from bus.core.settings import Settings  # noqa: E402
from bus.delivery.dispatch import RecordingDispatcher  # noqa: E402
from bus.delivery.engine import deliver_many  # noqa: E402
from bus.ops.embedded import EmbeddedRedis  # noqa: E402

LOOP_BATCH = 64  # kicks a loop takes at once (bus.delivery.kick_list.POP_MAX)
_trips = [0]


def _counting(real: Any) -> Any:
    def send_packed_command(self: Any, command: Any, check_health: bool = True) -> Any:
        _trips[0] += 1
        return real(self, command, check_health)

    return send_packed_command


def step(
    b: Bus, sids: list[str], prof: cProfile.Profile | None, threads: int = 1
) -> tuple[float, float, int, float]:
    rpid = int(b.store.r.info("server")["process_id"])
    chunks = [sids[i : i + LOOP_BATCH] for i in range(0, len(sids), LOOP_BATCH)]
    lock = threading.Lock()

    def loop() -> None:
        while True:
            with lock:
                if not chunks:
                    return
                chunk = chunks.pop(0)
            deliver_many(b.delivery, chunk)

    c0, r0, t0, w0 = time.process_time(), cpu_s(rpid), _trips[0], time.perf_counter()
    if prof is not None:
        prof.enable()
    if threads <= 1:
        loop()
    else:
        running = [threading.Thread(target=loop) for _ in range(threads)]
        for t in running:
            t.start()
        for t in running:
            t.join()
    if prof is not None:
        prof.disable()
    n = len(sids)
    return (
        (time.process_time() - c0) / n * 1e3,
        (cpu_s(rpid) - r0) / n * 1e3,
        _trips[0] - t0,
        (time.perf_counter() - w0) * 1e3,
    )


def _commands(b: Bus, on: bool) -> Any:
    """With ``on``, the server's command counters reset now; the returned function prints
    what a step ran, a session: calls (script calls, and the commands inside them, each
    counted) and the server's microseconds."""
    if not on:
        return lambda _name, _n: None
    b.store.r.config_resetstat()

    def report(name: str, n: int) -> None:
        stats = b.store.r.info("commandstats")
        rows = sorted(stats.items(), key=lambda kv: -kv[1]["usec"])
        print(f"{name}: commands a session (calls, server us)")
        for cmd, v in rows:
            if v["calls"] / n >= 0.05:
                print(
                    f"  {cmd.removeprefix('cmdstat_'):12s} {v['calls'] / n:6.2f} {v['usec'] / n:7.1f}"
                )

    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--sessions", type=int, default=500)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="kick loops delivering at once")
    p.add_argument("--profile", default=None)
    p.add_argument(
        "--profile-step",
        choices=("both", "arrival", "wake"),
        default="both",
        help="which step --profile covers",
    )
    p.add_argument(
        "--commands",
        action="store_true",
        help="the last round's Redis commands a session, by step (INFO commandstats)",
    )
    args = p.parse_args(argv)
    conn = redis.connection.AbstractConnection
    conn.send_packed_command = _counting(conn.send_packed_command)  # type: ignore[method-assign]
    tmp = Path(tempfile.mkdtemp(prefix="inbox-wakecpu-"))
    server = EmbeddedRedis(tmp / "r.sock", tmp / "data", persist=False).start()
    rows: dict[str, list[tuple[float, float, float, float]]] = {"arrival": [], "wake": []}
    try:
        for rnd in range(args.rounds):
            home = tmp / f"home{rnd}"
            home.mkdir()
            s = Settings(
                home=home,
                host="bench",
                redis_url=server.url,
                key_prefix=f"p{rnd}",
                send_rate=0.0,
                max_unread=0,
                wake_debounce_s=0.5,
            )
            b = Bus(s, dispatcher=RecordingDispatcher())
            sids = [f"wk{i}" for i in range(args.sessions)]
            for sid in sids:
                b.open_session(sid, host="bench")
                b.turn(sid, "start")
                b.turn(sid, "end")
            profiled = args.profile and args.threads <= 1 and rnd == args.rounds - 1
            prof = cProfile.Profile() if profiled else None
            b.send_many(
                [
                    {
                        "id": f"m{i}",
                        "from": "bench:x",
                        "to_id": sid,
                        "text": "go",
                        "class": "blocker",
                    }
                    for i, sid in enumerate(sids)
                ]
            )
            clock = ManualClock(int(time.time() * 1000))  # the plans' now: no wake due yet
            b.inbox.clock = clock
            only = args.profile_step
            last = rnd == args.rounds - 1
            counts = _commands(b, args.commands and last)
            rows["arrival"].append(step(b, sids, prof if only != "wake" else None, args.threads))
            counts("arrival", len(sids))
            last = b.store.r.zrange(b.store.k.due, -1, -1, withscores=True)
            clock.advance(int(last[0][1]) + 1 - clock.now_ms() if last else 0)
            due = [sid for _what, sid in b.store.take_due(clock.now_ms(), limit=10**6)]
            if len(due) != len(sids):
                print(f"round {rnd}: {len(due)} due of {len(sids)}")
            counts = _commands(b, args.commands and last)
            rows["wake"].append(step(b, due, prof if only != "arrival" else None, args.threads))
            counts("wake", len(due))
            woke = sum(1 for sid in sids if (b.session(sid).state == "running"))
            if woke != len(sids):
                print(f"round {rnd}: {woke} woken of {len(sids)}")
            if prof is not None:
                prof.dump_stats(args.profile)
        for name, got in rows.items():
            py, rd, trips, wall = zip(*got, strict=True)
            print(
                f"{name}: ms a session, median of {args.rounds}: python "
                f"{statistics.median(py):.3f} (best {min(py):.3f}), redis "
                f"{statistics.median(rd):.3f}; round trips "
                f"{statistics.median(trips) / args.sessions:.2f} a session; wall "
                f"{statistics.median(wall):.0f} ms ({args.threads} thread(s))"
            )
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
