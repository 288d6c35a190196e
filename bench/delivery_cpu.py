"""CPU a message of a worker's batched delivery (``bus.delivery.engine.deliver_many``), Python and
Redis apart, in the swarm's end-to-end shape.

    python bench/delivery_cpu.py [--sessions 50] [--messages 5000] [--rounds 4]

One process, its own embedded redis-server (nothing else runs there): each round opens
``--sessions`` running sessions, each with a listener on its socket that acks, sends
``--messages`` to them as ``swarm.py``'s 13 senders would (``send_many``, chunks of 1,000,
not measured), then delivers the burst as a worker's kick list does (``deliver_many`` over
every session, again until nothing is left). Per message: this process's CPU
(``time.process_time``: the delivery and the listeners' reads), the redis-server's CPU
(``/proc/<pid>/stat``, 10 ms ticks) and the wall time; the median (and best) round. Run two
trees interleaved to compare them (the end to end goal's worker side).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.ingest_cpu import cpu_s  # noqa: E402
from bus.api import Bus  # noqa: E402
from bus.core.settings import Settings  # noqa: E402
from bus.delivery.dispatch import RecordingDispatcher  # noqa: E402
from bus.delivery.engine import deliver_many  # noqa: E402
from bus.ops.embedded import EmbeddedRedis  # noqa: E402
from bus.surfaces.listener import Listener  # noqa: E402

SENDERS, CHUNK = 13, 1000


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--sessions", type=int, default=50)
    p.add_argument("--messages", type=int, default=5000)
    p.add_argument("--rounds", type=int, default=4)
    args = p.parse_args(argv)
    n = args.messages
    tmp = Path(tempfile.mkdtemp(prefix="inbox-delcpu-"))
    server = EmbeddedRedis(tmp / "r.sock", tmp / "data", persist=False).start()
    py: list[float] = []
    rd: list[float] = []
    wall: list[float] = []
    try:
        for rnd in range(args.rounds):
            home = tmp / f"home{rnd}"
            home.mkdir()
            s = Settings(home=home, host="bench", redis_url=server.url, key_prefix=f"p{rnd}")
            b = Bus(s, dispatcher=RecordingDispatcher())
            rpid = int(b.store.r.info("server")["process_id"])
            sids = [f"d{rnd}x{i}" for i in range(args.sessions)]
            for sid in sids:
                b.open_session(sid)
                b.turn(sid, "start")
            listeners = [  # each acks what it hears
                Listener.for_session(b.floor, sid, lambda _o: True).start() for sid in sids
            ]
            try:
                items: list[dict[str, Any]] = [
                    {
                        "id": f"r{rnd}-{i}",
                        "from": f"bench:lane{i % SENDERS}",
                        "to_id": sids[i % len(sids)],
                        "text": f"msg {i}",
                    }
                    for i in range(n)
                ]
                for j in range(SENDERS):
                    mine = items[j::SENDERS]
                    for i in range(0, len(mine), CHUNK):
                        b.send_many(mine[i : i + CHUNK])
                c0, w0, r0 = time.process_time(), time.perf_counter(), cpu_s(rpid)
                taken = 0
                for _ in range(20):  # a batch reads BATCH entries a session; again for more
                    got = sum(rep.inbox for rep in deliver_many(b.delivery, sids))
                    taken += got
                    if taken >= n or not got:
                        break
                py.append((time.process_time() - c0) / n * 1e6)
                wall.append((time.perf_counter() - w0) / n * 1e6)
                rd.append((cpu_s(rpid) - r0) / n * 1e6)
                if taken != n:
                    raise SystemExit(f"delivered {taken} of {n}")
            finally:
                for lst in listeners:
                    lst.stop()
        print(
            f"{args.sessions} sessions, {n} messages: µs a message, median (best) of "
            f"{args.rounds}: python {statistics.median(py):.1f} ({min(py):.1f}), "
            f"redis {statistics.median(rd):.1f} ({min(rd):.1f}), "
            f"wall {statistics.median(wall):.1f} ({min(wall):.1f})"
        )
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
