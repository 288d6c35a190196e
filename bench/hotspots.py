"""Where the time goes: cProfile and Redis command counts for ingest and delivery.

    python bench/hotspots.py [--messages 5000] [--sessions 50] [--top 25]

Runs in one process against its own embedded redis-server (so ``INFO commandstats`` counts
only this run): ingest (``Bus.send`` per message, then ``Bus.send_many``) and the worker's
job (``Bus.deliver_session`` for each session, then ``bus.delivery.engine.deliver_many`` over them
all, as a worker's kick list runs it; every session running with a listener on its socket
that acks), each under cProfile, with the Redis commands and round trips per
message. No Celery: dispatches are recorded, and the Celery cost per kick is measured
apart (``send_task`` per call). The findings are written up in bench/README.md.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import redis  # noqa: E402
import redis.connection  # noqa: E402

from bus.api import Bus  # noqa: E402
from bus.core.settings import Settings  # noqa: E402
from bus.delivery import engine as batch_mod  # noqa: E402
from bus.delivery.dispatch import RecordingDispatcher  # noqa: E402
from bus.ops.embedded import EmbeddedRedis  # noqa: E402
from bus.surfaces.listener import Listener  # noqa: E402


class Counting(redis.Redis):
    """A client whose round trips are counted where they happen: each packed send on a
    connection (one per command or pipeline, redis-py's own ``SCRIPT EXISTS`` included)."""

    trips = 0


_send = redis.connection.AbstractConnection.send_packed_command


def _counted_send(self: Any, command: Any, check_health: bool = True) -> None:
    Counting.trips += 1
    _send(self, command, check_health)


redis.connection.AbstractConnection.send_packed_command = _counted_send  # type: ignore[method-assign]


def stats(r: redis.Redis) -> dict[str, int]:
    return {k: int(v["calls"]) for k, v in r.info("commandstats").items()}


def measure(
    name: str, r: redis.Redis, n: int, fn: Callable[[], object], top: int
) -> dict[str, Any]:
    before, trips = stats(r), Counting.trips
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    fn()
    prof.disable()
    secs = time.perf_counter() - t0
    trips = Counting.trips - trips
    after = stats(r)
    calls = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    calls = {k: v for k, v in sorted(calls.items(), key=lambda kv: -kv[1]) if v > 0}
    out = io.StringIO()
    st = pstats.Stats(prof, stream=out)
    st.sort_stats("cumulative").print_stats(top)
    st.sort_stats("tottime").print_stats(top)
    print(f"\n=== {name}: {n} messages in {secs:.3f} s ({n / secs:.0f}/s, profiled) ===")
    # Counted per send on a connection: a SCRIPT EXISTS redis-py sends is one more.
    print(f"round trips per message: {trips / n:.2f}")
    print(
        "redis commands per message: "
        + ", ".join(f"{k.removeprefix('cmdstat_')} {v / n:.2f}" for k, v in calls.items())
    )
    print(out.getvalue())
    return {"s": secs, "trips": trips, "calls": calls}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--messages", type=int, default=5000)
    p.add_argument("--sessions", type=int, default=50)
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args(argv)
    n, m = args.messages, args.sessions
    tmp = Path(tempfile.mkdtemp(prefix="inbox-prof-"))
    server = EmbeddedRedis(tmp / "r.sock", tmp / "data", persist=False).start()
    try:
        home = tmp / "home"
        home.mkdir()
        s = Settings(home=home, host="prof", redis_url=server.url, key_prefix="prof")
        client = Counting.from_url(server.url, decode_responses=True)
        b = Bus(s, client=client, dispatcher=RecordingDispatcher())
        r = b.store.r
        sids = [f"s{i}" for i in range(m)]
        for sid in sids:
            b.open_session(sid)
            b.turn(sid, "start")
        got: list[int] = []
        listeners = [
            Listener.for_session(b.floor, sid, lambda o: got.append(1) or True).start()
            for sid in sids
        ]

        def items(tag: str) -> list[dict[str, Any]]:
            return [
                {
                    "id": f"{tag}{i}",
                    "from": f"p:lane{i % 13}",
                    "to_id": sids[i % m],
                    "text": f"m{i}",
                }
                for i in range(n)
            ]

        single = items("a")
        measure("ingest, Bus.send per message", r, n, lambda: [b.send(x) for x in single], args.top)
        measure(
            "delivery, deliver_session per session (after the per-message sends)",
            r,
            n,
            lambda: [b.deliver_session(sid) for sid in sids],
            args.top,
        )
        batch = items("b")
        if hasattr(b, "send_many"):
            measure("ingest, Bus.send_many", r, n, lambda: b.send_many(batch), args.top)
            measure(
                "delivery, deliver_session per session (after send_many)",
                r,
                n,
                lambda: [b.deliver_session(sid) for sid in sids],
                args.top,
            )
        if hasattr(batch_mod, "deliver_many"):
            burst = items("d")
            b.send_many(burst)
            cpu = time.process_time()
            measure(
                "delivery, bus.delivery.engine.deliver_many over every session (a worker's kick list)",
                r,
                n,
                lambda: batch_mod.deliver_many(b.delivery, sids),
                args.top,
            )
            # Profiled, so inflated; bench/README.md's CPU per message runs it unprofiled.
            print(
                f"process CPU per message (profiled): {(time.process_time() - cpu) / n * 1e6:.0f} us"
            )
        # One kick: what the delivery costs with nothing or one message queued.
        kicks = 200
        measure(
            "deliver_session with an empty queue (per kick)",
            r,
            kicks,
            lambda: [b.deliver_session(sids[i % m]) for i in range(kicks)],
            12,
        )
        one = items("c")[:kicks]
        measure(
            "one send then its delivery (per message)",
            r,
            kicks,
            lambda: [(b.send(x), b.deliver_session(x["to_id"])) for x in one],
            12,
        )
        for lst in listeners:
            lst.stop()
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
