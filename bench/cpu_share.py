"""Where a benchmark's CPU and Redis calls go: per role of the run's own processes.

    from bench.cpu_share import sample, report
    res = sample(os.getpid(), 60, nodes=[redis.Redis(...), ...], slowlog=True)
    print(report(res))

or from outside a running run: ``python bench/cpu_share.py RIG_PID SECONDS [--slowlog]``.

- CPU: ``utime + stime`` of every process descended from ``root`` (``/proc/<pid>/stat``),
  at the start and the end of the window, summed per role (:func:`role_of` reads the
  command line) and divided by the wall: cores per role.
- Redis: ``INFO commandstats`` deltas of each node given (commands a script runs count
  too, as Redis counts them): calls/s in all and per command.
- ``slowlog``: every node logs every command (``slowlog-log-slower-than 0``) for the
  window, read and reset every second; each entry's client address is matched to the
  process holding that socket (``/proc/<pid>/fd`` and the namespace's ``/proc/<pid>/net/tcp``),
  so the client commands/s are given per role and per script (``EVALSHA`` by the SHA of
  ``bus/store/lua/<name>.lua``), with the server time of each (the slow log's µs: a
  script's hold the commands it ran). The settings are put back at the end.
- ``pyspy``: py-spy (``pip install py-spy`` in the venv), when installed, records the
  busiest Python processes for the window's last part; their top functions are printed.

Only the run's own servers are touched: never the shared Redis.
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import redis

from tests.support.slowlog import QUIET, Slowlog

TICK = os.sysconf("SC_CLK_TCK")


def role_of(cmd: list[str], broker_port: int | None = None) -> str:
    """The role of a process of the swarm from its command line."""
    text = " ".join(cmd)
    if "redis-server" in text:
        m = re.search(r"--port (\d+)", text)
        return "broker" if m and broker_port and int(m[1]) == broker_port else "redis"
    if "--role harness" in text:
        return "harness"
    if "--role sender" in text:
        return "sender"
    for word, role in (
        ("workers.standby", "spare"),
        ("scheduler", "scheduler"),
        ("watch", "coordinator"),
        ("worker", "worker"),
        (" up ", "up"),
    ):
        if word in f"{text} ":
            return role
    if "celery" in text or "billiard" in text:
        return "worker"
    return "rig" if "swarm_hosts" in text else "other"


def _stat(pid: int) -> tuple[int, int] | None:
    """``(ppid, ticks)`` of ``pid``, or None once it is gone."""
    try:
        rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(rest[1]), int(rest[11]) + int(rest[12])


def tree(root: int) -> dict[int, int]:
    """pid -> CPU ticks of ``root`` and every process descended from it."""
    stats: dict[int, tuple[int, int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (st := _stat(int(entry))) is not None:
            stats[int(entry)] = st
    kids: dict[int, list[int]] = collections.defaultdict(list)
    for pid, (ppid, _) in stats.items():
        kids[ppid].append(pid)
    out, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            out[pid] = stats[pid][1]
        todo.extend(kids.get(pid, []))
    return out


def _cmd(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _commandstats(node: Any) -> dict[str, int]:
    info = node.info("commandstats")
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in info.items()}


def _pyspy(pids: list[int], seconds: float, roles: dict[int, str]) -> dict[str, list[str]]:
    """py-spy's top functions (own samples) of each process in ``pids``."""
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(exe).exists():
        return {"py-spy": ["not installed (pip install py-spy in the venv)"]}
    out: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        procs = {
            pid: subprocess.Popen(
                [exe, "record", "-p", str(pid), "-d", str(int(seconds)), "-r", "50",
                 "--nonblocking", "-f", "raw", "-o", f"{tmp}/{pid}.txt"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            for pid in pids
        }  # fmt: skip
        for pid, proc in procs.items():
            try:
                proc.wait(seconds + 30)
            except subprocess.TimeoutExpired:
                proc.kill()
            leaf: collections.Counter[str] = collections.Counter()
            total = 0
            path = Path(f"{tmp}/{pid}.txt")
            for line in path.read_text().splitlines() if path.exists() else []:
                stack, _, n = line.rpartition(" ")
                frames = stack.split(";")
                total += int(n)
                for fr in frames[-3:]:
                    leaf[fr] += int(n)
            out[f"{roles.get(pid, '?')} {pid}"] = [
                f"{100 * c / max(1, total):.0f}% {f}" for f, c in leaf.most_common(8)
            ]
    return out


def sample(
    root: int,
    seconds: float,
    *,
    nodes: list[Any],
    broker: Any = None,
    broker_port: int | None = None,
    slowlog: bool = False,
    pyspy: bool = False,
) -> dict[str, Any]:
    """Cores per role, Redis calls/s (and per role with ``slowlog``) over ``seconds``."""
    before = tree(root)
    roles = {pid: role_of(_cmd(pid), broker_port) for pid in before}
    stats0 = [_commandstats(n) for n in nodes]
    broker0 = _commandstats(broker) if broker is not None else {}
    log = Slowlog(nodes, roles) if slowlog else None
    spy: dict[str, list[str]] = {}
    t0 = time.monotonic()
    spy_thread = None
    if pyspy:

        def spy_busiest() -> None:
            now = tree(root)
            busy = sorted(
                (p for p in now if roles.get(p) not in (None, "redis", "broker", "rig", "other")),
                key=lambda p: before.get(p, 0) - now[p],
            )[:6]
            spy.update(_pyspy(busy, max(5.0, seconds / 2 - 2), roles))

        spy_thread = threading.Thread(target=spy_busiest, daemon=True)
    try:
        while (left := t0 + seconds - time.monotonic()) > 0:
            if spy_thread is not None and spy_thread.ident is None and left <= seconds / 2:
                spy_thread.start()
            time.sleep(min(1.0, left))
            if log is not None:
                log.poll()
    finally:
        if log is not None:
            log.close()
    wall = time.monotonic() - t0
    after = tree(root)
    if spy_thread is not None and spy_thread.ident is not None:
        spy_thread.join(seconds + 60)
    for pid in after:
        roles.setdefault(pid, role_of(_cmd(pid), broker_port))
    cores: dict[str, float] = collections.defaultdict(float)
    procs: collections.Counter[str] = collections.Counter()
    for pid, ticks in after.items():
        cores[roles[pid]] += (ticks - before.get(pid, 0)) / TICK / wall
        procs[roles[pid]] += 1
    calls: collections.Counter[str] = collections.Counter()
    for n, s0 in zip(nodes, stats0, strict=True):
        for cmd, c in _commandstats(n).items():
            if cmd.split("|")[0] not in QUIET:
                calls[cmd] += c - s0.get(cmd, 0)
    if broker is not None:
        got = _commandstats(broker)
        bcalls = sum(c - broker0.get(k, 0) for k, c in got.items() if k.split("|")[0] not in QUIET)
    res: dict[str, Any] = {
        "wall_s": round(wall, 1),
        "cores": {r: round(c, 3) for r, c in sorted(cores.items(), key=lambda x: -x[1])},
        "cores_total": round(sum(cores.values()), 3),
        "processes": dict(procs),
        "redis_calls_s": round(sum(calls.values()) / wall, 1),
        "broker_calls_s": round(bcalls / wall, 1) if broker is not None else None,
        "redis_calls_s_by_command": {
            k: round(v / wall, 1) for k, v in calls.most_common(15) if v > 0
        },
    }
    if log is not None:
        by_role: collections.Counter[str] = collections.Counter()
        for (role, _), c in log.counts.items():
            by_role[role] += c
        res["client_calls_s_by_role"] = {r: round(c / wall, 1) for r, c in by_role.most_common()}
        res["script_calls_s"] = {
            f"{r} {n[4:]}": round(c / wall, 1)
            for (r, n), c in log.counts.most_common()
            if n.startswith("lua:")
        }
        res["client_calls_s_top"] = {
            f"{r} {n}": round(c / wall, 1) for (r, n), c in log.counts.most_common(20)
        }
        # Milliseconds of server time a second (1,000: one node's core), by command or
        # script as clients sent them.
        res["server_ms_s_top"] = {
            n.removeprefix("lua:"): round(us / wall / 1000, 1)
            for n, us in log.micros.most_common(20)
        }
    if spy:
        res["pyspy"] = spy
    return res


def report(res: dict[str, Any]) -> str:
    """The sample as a few readable lines."""
    lines = [
        f"idle sample {res['wall_s']} s: {res['cores_total']} cores, "
        f"Redis {res['redis_calls_s']} calls/s (broker {res['broker_calls_s']})",
        "  cores: "
        + ", ".join(f"{r} {c} ({res['processes'][r]})" for r, c in res["cores"].items()),
        "  calls/s: " + ", ".join(f"{k} {v}" for k, v in res["redis_calls_s_by_command"].items()),
    ]
    if "client_calls_s_by_role" in res:
        lines.append(
            "  client calls/s by role: "
            + ", ".join(f"{k} {v}" for k, v in res["client_calls_s_by_role"].items())
        )
        lines += [f"    {k}: {v}" for k, v in res["client_calls_s_top"].items()]
        lines.append(
            "  script calls/s: " + ", ".join(f"{k} {v}" for k, v in res["script_calls_s"].items())
        )
        lines.append(
            "  server ms/s (slow log times): "
            + ", ".join(f"{k} {v}" for k, v in res["server_ms_s_top"].items())
        )
    for who, top in res.get("pyspy", {}).items():
        lines.append(f"  py-spy {who}:")
        lines += [f"    {t}" for t in top]
    return "\n".join(lines)


def swarm_sample(soak: Any) -> dict[str, Any]:
    """bench/cpu_share.py's sample of the set-up swarm (nothing sent yet)."""
    assert soak.cluster is not None and soak.broker is not None
    roles = soak.cluster.roles()
    masters = [n for n in soak.cluster.nodes if roles.get(n.port, {}).get("role") == "master"]
    broker = redis.Redis(
        host=soak.net.gateway, port=soak.broker.port, password=soak.cluster.password
    )
    return sample(
        os.getpid(),
        soak.args.idle_sample,
        nodes=[soak.cluster.client(n, timeout=5.0) for n in masters],
        broker=broker,
        broker_port=soak.broker.port,
        slowlog=soak.args.slowlog,
        pyspy=soak.args.pyspy,
    )


def _servers(root: int) -> tuple[list[Any], Any, int | None]:
    """The cluster masters and the broker of ``root``'s run: their URLs from a child's
    ``INBOX_REDIS_URL`` and ``INBOX_BROKER_URL`` (a redis-server rewrites its own title)."""
    from urllib.parse import urlsplit

    env: dict[str, str] = {}
    for pid in tree(root):
        try:
            raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        got = dict(e.decode(errors="replace").partition("=")[::2] for e in raw if b"=" in e)
        if "INBOX_BROKER_URL" in got:
            env = got
            break
    store = urlsplit(env["INBOX_REDIS_URL"].split(",")[0])
    broker = urlsplit(env["INBOX_BROKER_URL"])
    first = redis.Redis(
        host=str(store.hostname), port=int(store.port or 6379), password=store.password,
        decode_responses=True,
    )  # fmt: skip
    masters = []
    for addr, info in first.execute_command("CLUSTER NODES").items():
        if "master" in info.get("flags", "") and "fail" not in info.get("flags", ""):
            host, _, port = addr.partition("@")[0].rpartition(":")
            masters.append(
                redis.Redis(host=host, port=int(port), password=store.password,
                            socket_timeout=10, decode_responses=True)
            )  # fmt: skip
    port = int(broker.port or 6379)
    node = redis.Redis(host=str(broker.hostname), port=port, password=broker.password)
    return masters, node, port


def main() -> int:
    """``python bench/cpu_share.py ROOT_PID SECONDS [--slowlog]``: sample a running swarm
    (e.g. ``swarm_hosts.py`` while it sends) from outside."""
    import argparse
    import json

    ap = argparse.ArgumentParser(description="cores per role and Redis calls of a running swarm")
    ap.add_argument("root_pid", type=int, help="the swarm's root process (e.g. swarm_hosts.py)")
    ap.add_argument("seconds", type=float, help="how long to sample")
    ap.add_argument("--slowlog", action="store_true", help="match each command to its process")
    args = ap.parse_args()
    root, seconds = args.root_pid, args.seconds
    masters, broker, port = _servers(root)
    res = sample(
        root, seconds, nodes=masters, broker=broker, broker_port=port, slowlog=args.slowlog
    )
    print(report(res))
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())
