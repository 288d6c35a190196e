"""The docker-compose topology as local processes, in the foreground.

    python compose/local.py [--hosts a,b] [--dir DIR] [--redis-port PORT]

One Redis (the embedded redis-server, persistent under DIR/redis, unless INBOX_REDIS_URL
is set), one `inbox worker` per host with its own INBOX_HOME=DIR/<host>, one
`inbox scheduler`, all supervised: a process that exits is restarted (with backoff, one
line on stderr), and a second run on the same DIR says "already running (pid N)" and exits 1.
Prints the environment each host's sessions need; Ctrl-C or SIGTERM stops the workers and
the scheduler, then Redis. The logic lives in bus/ops/topology.py (tests start it from there).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path

# Run as a script from a checkout: make `bus` importable without installing it.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bus.ops.topology import start_topology

# A session's own credentials: never passed to the bus's processes nor printed.
PRIVATE = ("INBOX_SECRET", "INBOX_TOKEN", "INBOX_SESSION")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", default="a,b", help="comma-separated host names (a,b)")
    parser.add_argument(
        "--dir", default="./inbox-local", help="state directory (DIR/<host> per host)"
    )
    parser.add_argument(
        "--redis-port", type=int, default=0, help="embedded Redis on this TCP port too"
    )
    parser.add_argument("--concurrency", type=int, default=2, help="processes per worker")
    args = parser.parse_args(argv)
    hosts = [h.strip() for h in args.hosts.split(",") if h.strip()]

    stop = threading.Event()
    # Set before starting, so a Ctrl-C during start-up still stops what already runs.
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        topo = start_topology(
            Path(args.dir),
            hosts,
            redis_url=os.environ.get("INBOX_REDIS_URL") or None,
            key_prefix=os.environ.get("INBOX_KEY_PREFIX") or None,
            redis_port=args.redis_port,
            concurrency=args.concurrency,
            # The other settings of this environment (INBOX_MEMORY_SETTINGS, debounces...)
            # reach every child; the topology's own (host, home, URLs) take precedence.
            env={
                k: v for k, v in os.environ.items() if k.startswith("INBOX_") and k not in PRIVATE
            },
        )
    except (RuntimeError, ValueError) as exc:
        print(f"local: {exc}", file=sys.stderr)
        return 1
    try:
        print(
            f"local topology: Redis {topo.redis_url}, hosts {', '.join(hosts)}, dir {topo.base_dir}"
        )
        for host in hosts:
            print(f"\n# a shell on host {host} (logs: {topo.home(host) / 'worker.log'}):")
            print("\n".join(topo.export_lines(host)))
        first, last = hosts[0], hosts[-1]
        print(
            f"\n# try it: on {last}: inbox session open demo"
            f"\n#         on {first}: inbox send --to-id demo --from {first}:me --text hello"
            f"\n#         on {last}: inbox drain demo --stamped"
            "\nCtrl-C stops everything.",
            flush=True,
        )
        # The topology supervises itself: a child that exits is restarted (bus/ops/supervise.py).
        while not stop.wait(0.5):
            pass
        return 0
    finally:
        topo.stop()
        print("local topology: stopped", flush=True)


if __name__ == "__main__":
    sys.exit(main())
