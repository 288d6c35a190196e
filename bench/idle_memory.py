"""What an idle session costs on a stock redis-server (its default settings), with a real
worker and the scheduler running.

    python bench/idle_memory.py [--sessions 1000] [--settle 90] [--cluster] [--keep-config]

A stock server is started for the run from ``INBOX_SERVER_BINARY`` if set, else the
``redis-server`` on PATH (else the embedded one), with nothing but its port, its directory and persistence off: every
memory setting is the server's default. ``--cluster``: the store on a 3-master Redis
Cluster of stock nodes, the broker on its own stock server. Sessions are registered and
running, each gets one message, delivered and noticed on the floor and drained; then each
turn ends (idle) and the scheduler's housekeeping runs ``--settle`` seconds. Figures:
bytes per session from ``INFO memory`` (the servers' ``used_memory``, less the clients'
buffers) and from ``MEMORY USAGE`` summed over the run's keys, keys per session, and per
key kind its keys, bytes and encodings. The base is taken after a few warm-up sessions went
through the same cycle and ``--warm`` seconds of housekeeping (the one-time costs), and
each server's slow log is emptied before each reading. ``--keep-config``: the bus does not set its
memory settings (``bus.store.server_memory``), the stock figures. A JSON line with every figure ends
the output.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import redis  # noqa: E402

from bench.burst import BenchError, bench_settings, celery_bus, close_bus, wait_until  # noqa: E402
from bench.swarm import key_kind, open_running, send_all, wire  # noqa: E402
from bus.core.settings import Settings  # noqa: E402
from tests.support.local_servers import (  # noqa: E402
    EmbeddedCluster,
    free_cluster_ports,
    stock_binary,
    stock_server,
)
from tests.support.worker_proc import WorkerProcess, inbox_worker_argv  # noqa: E402


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    proc.wait(10)


def nodes(s: Settings) -> list[redis.Redis]:
    """A plain client per master of the store (one for a standalone server)."""
    if not s.redis_cluster:
        return [redis.Redis.from_url(s.redis_url or "", decode_responses=True)]
    from bus.store.cluster import cluster_client

    c = cluster_client(s.redis_url or "")
    out = [redis.Redis(host=n.host, port=n.port, decode_responses=True) for n in c.get_primaries()]
    c.close()
    return out


def used(ns: list[redis.Redis]) -> int:
    """``used_memory`` less the clients' buffers, summed over the masters. Each server's
    slow log is emptied first: its entries (at most ``slowlog-max-len``, 128 by default,
    each keeping a slow command's first 32 arguments, ~200 KB in all after a loaded run
    of batched appends) are the server's bounded log, not a session's memory."""
    total = 0
    for n in ns:
        n.slowlog_reset()
        mem = int(n.info("memory")["used_memory"])
        clients = sum(int(c.get("tot-mem", 0)) for c in n.client_list())
        total += mem - clients
    return total


INFO_FIELDS = (
    "used_memory_dataset",
    "used_memory_overhead",
    "used_memory_scripts",
    "used_memory_vm_eval",
    "mem_clients_normal",
    "used_memory_lua",
)


def info_fields(ns: list[redis.Redis]) -> dict[str, int]:
    """A few ``INFO memory`` fields and the key count, summed over the masters."""
    out: dict[str, int] = {}
    for n in ns:
        mem = n.info("memory")
        for name in INFO_FIELDS:
            out[name] = out.get(name, 0) + int(mem.get(name, 0) or 0)
        out["dbsize"] = out.get("dbsize", 0) + int(n.dbsize())
    return out


def kinds(ns: list[redis.Redis], prefix: str) -> dict[str, dict[str, Any]]:
    """kind -> keys, bytes (MEMORY USAGE), encodings, over the run's keys."""
    out: dict[str, dict[str, Any]] = {}
    for n in ns:
        names = list(n.scan_iter(match=f"{prefix}:*", count=1000))
        pipe = n.pipeline(transaction=False)
        for name in names:
            pipe.memory_usage(name, samples=0)
            pipe.object("encoding", name)
        replies = pipe.execute()
        for i, name in enumerate(names):
            row = out.setdefault(key_kind(name, prefix), {"keys": 0, "bytes": 0, "enc": Counter()})
            row["keys"] += 1
            row["bytes"] += int(replies[2 * i] or 0)
            row["enc"][str(replies[2 * i + 1])] += 1
    return out


WARM_SESSIONS = 12


def cycle(observer: Any, sids: list[str], tag: str) -> None:
    """Sessions registered and running, one message each delivered, noticed on the floor
    and drained, each turn ended: idle."""
    open_running(observer, sids)
    send_all(observer, [wire(i, 1, sid, tag) for i, sid in enumerate(sids)])
    wait_until(lambda: all(observer.floor.peek(sid) for sid in sids), 300, "notices", 0.2)
    for sid in sids:
        observer.drain(sid)
        observer.turn(sid, "end", answer="ok")


def measure(args: argparse.Namespace) -> dict[str, Any]:
    with ExitStack() as stack:
        tmp = Path(tempfile.mkdtemp(prefix="inbox-idle-mem-"))
        stack.callback(shutil.rmtree, tmp, True)
        broker = stock_server(tmp, stack)
        prefix = f"mem{uuid.uuid4().hex[:8]}"
        s = bench_settings(tmp / "home", broker, prefix)
        # What a user's bus keeps (the benches keep the sessions' events for their counts).
        s = replace(s, events_keep_s=Settings().events_keep_s, memory_settings=not args.keep_config)
        if args.cluster:
            cluster = EmbeddedCluster(tmp / "cluster", free_cluster_ports(3), memory_args=False)
            cluster.start()
            stack.callback(cluster.stop)
            s = replace(s, redis_url=cluster.url, redis_cluster=True)
        env = {"INBOX_MEMORY_SETTINGS": "0"} if args.keep_config else {}
        ns = nodes(s)
        before_used = used(ns)
        worker = WorkerProcess(s, inbox_worker_argv("prefork", 1), env=env)
        stack.callback(worker.stop)
        sched_env = {**os.environ, **s.child_env(), **env}
        sched = subprocess.Popen(
            [sys.executable, "-m", "bus.surfaces.cli.app", "scheduler"],
            env=sched_env,
            cwd=str(REPO),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        stack.callback(_stop, sched)
        observer = celery_bus(s)
        stack.callback(close_bus, observer)
        wait_until(
            lambda: any(w["role"] == "scheduler" for w in observer.status()["workers"]),
            60,
            "the scheduler's heartbeat",
            0.1,
        )
        # A few sessions through the whole cycle first (on a cluster, each master's slots
        # get some), and the housekeeping passes (once a
        # minute) after it: the server's one-time costs of a bus at work (its scripts
        # loaded, ~50 KB, and ~650 KB of dataset that a run of one session grows it by as
        # much as a run of 1,000) are not a session's.
        cycle(observer, [f"warmidle{i}" for i in range(WARM_SESSIONS)], "warm")
        time.sleep(args.warm)
        base = kinds(ns, prefix)
        before_used = used(ns)
        before_info = info_fields(ns)
        sids = [f"idle{i}" for i in range(args.sessions)]
        cycle(observer, sids, "mem")
        time.sleep(args.settle)  # the scheduler's housekeeping runs meanwhile
        after_used = used(ns)
        after_info = info_fields(ns)
        after = kinds(ns, prefix)
        status = observer.status()
        n = args.sessions
        by_kind = {}
        for kind, row in sorted(after.items()):
            b = base.get(kind, {"keys": 0, "bytes": 0})
            if row["keys"] == b["keys"] and row["bytes"] == b["bytes"]:
                continue
            by_kind[kind] = {
                "keys_per_session": round((row["keys"] - b["keys"]) / n, 2),
                "bytes_per_session": round((row["bytes"] - b["bytes"]) / n),
                "encodings": dict(row["enc"]),
            }
        for c in ns:
            c.close()
        return {
            "store": "cluster (3 stock masters)" if args.cluster else "stock standalone",
            "server": stock_binary(),
            "sessions": n,
            "settle_s": args.settle,
            "warm_s": args.warm,
            "bus_sets_memory_settings": not args.keep_config,
            "info_bytes_per_session": round((after_used - before_used) / n),
            "usage_bytes_per_session": round(
                (sum(r["bytes"] for r in after.values()) - sum(r["bytes"] for r in base.values()))
                / n
            ),
            "keys_per_session": round(
                (sum(r["keys"] for r in after.values()) - sum(r["keys"] for r in base.values()))
                / n,
                2,
            ),
            "by_kind": by_kind,
            # Per session: what INFO's used_memory moved by, field by field.
            "info_per_session": {
                name: round((after_info[name] - before_info.get(name, 0)) / n, 1)
                for name in after_info
            },
            "memory_settings": status.get("memory_settings"),
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--settle", type=float, default=90.0, help="seconds of housekeeping")
    parser.add_argument(
        "--warm", type=float, default=65.0, help="seconds after the warm-up sessions' cycle"
    )
    parser.add_argument("--cluster", action="store_true", help="the store on a 3-master cluster")
    parser.add_argument(
        "--keep-config", action="store_true", help="the bus leaves the server's settings alone"
    )
    args = parser.parse_args(argv)
    try:
        res = measure(args)
    except BenchError as exc:
        print(f"idle_memory: {exc}", file=sys.stderr)
        return 1
    for kind, row in res["by_kind"].items():
        print(
            f"{kind:24} {row['keys_per_session']:>5} keys {row['bytes_per_session']:>6} B  {row['encodings']}"
        )
    print(
        f"{res['store']}: {res['info_bytes_per_session']} B/session (INFO), "
        f"{res['usage_bytes_per_session']} B (MEMORY USAGE), {res['keys_per_session']} keys"
    )
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
