"""What the worker's look at its sessions' holders costs (bus.delivery.holder_watch).

    python bench/holder_watch.py [--sessions N] [--held M] [--looks K]

A temp home with ``--sessions`` session folders, ``--held`` of them holding two live
processes (this one and its parent); ``--looks`` looks timed after a first one (which
reads each holders file once). Prints the wall and CPU milliseconds a look takes and the
records it read from the store (0: nothing ended, no Redis).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402

from bus.delivery import kept_wake  # noqa: E402
from bus.delivery.floor import Floor  # noqa: E402
from bus.delivery.holder_watch import EVERY_S, HolderWatch  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=2000)
    p.add_argument("--held", type=int, default=200)
    p.add_argument("--looks", type=int, default=20)
    args = p.parse_args()
    home = Path(tempfile.mkdtemp(prefix="holder-watch-"))
    try:
        floor = Floor(home)
        me, parent = psutil.Process(), psutil.Process(os.getppid())
        held = [(me.pid, me.create_time()), (parent.pid, parent.create_time())]
        for i in range(args.sessions):
            floor.session_dir(f"s{i}", create=True)
            if i < args.held:
                kept_wake.keep_holders(floor, f"s{i}", held)
        reads: list[str] = []
        watch = HolderWatch(floor, "bench", lambda sid: None, lambda sid: reads.append(sid))
        watch.check()
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(args.looks):
            watch.check()
        wall_ms = (time.perf_counter() - wall) / args.looks * 1000
        cpu_ms = (time.process_time() - cpu) / args.looks * 1000
        print(
            f"{args.sessions} sessions, {args.held} with 2 live holders: a look "
            f"{wall_ms:.1f} ms wall, {cpu_ms:.1f} ms CPU "
            f"({cpu_ms / (EVERY_S * 10):.2f}% of a core at one look every {EVERY_S:g} s); "
            f"store reads: {len(reads)}"
        )
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
