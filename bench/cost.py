"""The cost of one message on the paths users take, each beside its baseline in one run.

    python bench/cost.py [--quick] [--runs 20] [--sparse-s 60] [--burst 50000] [--skip ROWS]
                         [--server-binary PATH ...]

``make bench`` runs it at its default sizes (about 6 minutes on 2 cores); ``--quick`` is the
smoke test ``tests/soak/test_bench.py`` runs. Rows (``--skip`` takes their names):

- **cli**: wall of ``inbox send --to-id X --from a:b --text hi`` (warm, through ``inbox
  up``'s command server, and cold, ``INBOX_FAST_SEND=0``), ``inbox reply``,
  ``inbox withdraw``, ``inbox decide`` and ``inbox status`` as whole processes (the venv's
  ``inbox``, the median of ``--runs`` after two untimed, ``inbox up`` serving), each run
  alternately with a bare start of the same Python (``python -c pass``, site loaded;
  ``python -S -c pass`` beside it); each ratio is against the bare starts run between
  that command's own runs;
- **sparse**: 200 listening sessions, 20 messages/s (Poisson), ``--sparse-s`` seconds, to a
  naive Celery task per message, a minimal XREAD consumer and ``inbox up``, each on its own
  redis-server, all up at once and sent the same arrivals in turn, in three rounds: CPU a
  message, processes and Redis apart (bench/cost_sparse.py);
- **lone**: the worker's Redis round trips and script calls for one lone message
  (bench/lone_trips.py);
- **burst**: one ``inbox send --jsonl`` of ``--burst`` messages to 50 listening sessions,
  end to end against a naive Celery task per message, and its ingest against raw
  pipelined XADD (bench/userpath.py, bench/swarm.py's rows);
- **memory**: bytes per idle session on a stock redis-server with the scheduler running
  (bench/idle_memory.py, run beside the sparse rows: it measures memory, not time);
- **durability**: one send and a batch's message at each ``INBOX_DURABILITY`` level
  (memory, disk, replica, and disk on ``appendfsync always``), each beside memory's
  (bench/cost_durability.py).

Every figure is measured in the run; each goal is marked met or not from it. The run ends
with one JSON line holding every figure.

``--server-binary PATH`` (repeatable, ``LABEL=PATH`` to name it): the rows run once per
server binary in turn (``INBOX_SERVER_BINARY``: the embedded server, the stock servers and
the sparse systems' servers are all started from it), each run's report printed, then each
goal's figure side by side, with each binary's start (spawn to its first PONG, median of 7)
and its empty RSS and ``used_memory``. Without it, the one run uses the default binaries.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.burst import BenchError, sigterm_exits  # noqa: E402
from bench.cost_report import goals, report  # noqa: E402

QUICK: dict[str, Any] = {
    "runs": 3,
    "sparse_s": 3.0,
    "rounds": 1,
    "quiet_s": 1.0,
    "sessions": 20,
    "burst": 2000,
    "naive": 300,
    "memory": 50,
    "housekeeping_s": 0.0,  # the bus's idle sample as short as the others'
    "durability": (20, 100),  # single sends, a batch's messages
}
FULL: dict[str, Any] = {
    "runs": 20,
    "sparse_s": 60.0,
    "rounds": 3,
    "quiet_s": 3.0,
    "sessions": 200,
    "burst": 50000,
    "naive": 5000,
    "memory": 1000,
    "durability": (300, 1000),
}
INBOX = Path(sys.executable).parent / "inbox"
# Untimed runs of each command first: each of the command server's workers has run it once.
WARM = 2


# -- cli ---------------------------------------------------------------------------------


def _wall(argv: list[str], env: dict[str, str]) -> tuple[float, int, str]:
    t0 = time.perf_counter()
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    return time.perf_counter() - t0, p.returncode, p.stdout + p.stderr


def cli_rows(runs: int, tmp: Path) -> dict[str, Any]:
    """The CLI's writes and ``status`` beside a bare interpreter, ``inbox up`` serving.
    ``bus`` is byte-compiled first, as an install is: a tree whose ``__pycache__`` was never
    written (``PYTHONDONTWRITEBYTECODE`` in the environment) compiles the entry point on
    every run."""
    import compileall

    from bench.burst import celery_bus, close_bus
    from bench.cost_sparse import Server, bus_system, inbox_env, sender_settings

    compileall.compile_dir(str(REPO / "bus"), quiet=1)
    out: dict[str, Any] = {"runs": runs}
    home = tmp / "home-cli"
    home.mkdir()
    with ExitStack() as stack:
        server = Server(tmp, "cli")
        stack.callback(server.stop)
        env = {**inbox_env(home, server.url), "INBOX_SEND_RATE": "0", "INBOX_MAX_UNREAD": "0"}
        env.pop("PYTHONPATH")  # the venv's entry point as installed
        stack.enter_context(bus_system(home, server.url, tmp / "cli-up.log", ["cli-a", "cli-b"]))
        lib = celery_bus(sender_settings(home, server.url))
        stack.callback(close_bus, lib)

        def send_hi() -> list[str]:
            return [str(INBOX), "send", "--to-id", "cli-b", "--from", "a:b", "--text", "hi"]

        # Session cli-a's messages to cli-b, through the library (not timed): a thread cli-b
        # is a party of, for reply, and a message a run for cli-a to withdraw.
        def from_a() -> dict[str, Any]:
            m = {"to_id": "cli-b", "from": "costbench:cli-a", "from_session": "cli-a"}
            return lib.send({**m, "text": "hi"})

        thread = str(from_a()["thread"])
        sent = [str(from_a()["id"]) for _ in range(WARM + runs)]
        # Typed requests from cli-a, for cli-b to decide on (as INBOX_SESSION).
        asks = [
            str(lib.request("cli-b", "task", "do it", actor="cli-a")["thread"])
            for _ in range(WARM + runs)
        ]
        cases = {
            "send": lambda: send_hi(),
            # The same send run in its own process (no command server: the cold start).
            "send_cold": lambda: send_hi(),
            "reply": lambda: [str(INBOX), "reply", "cli-b", thread, "--text", "ok"],
            "withdraw": lambda: [str(INBOX), "withdraw", sent.pop(), "--by", "cli-a"],
            "decide": lambda: [str(INBOX), "decide", asks.pop(), "accept"],
            "status": lambda: [str(INBOX), "status"],
        }
        bare: list[float] = []
        bare_s: list[float] = []
        envs = {
            "send_cold": {**env, "INBOX_FAST_SEND": "0"},
            "decide": {**env, "INBOX_SESSION": "cli-b"},
        }
        for name, argv in cases.items():
            walls: list[float] = []
            pairs: list[float] = []
            for n in range(WARM + runs):  # A B A B: a drift of the machine hits both alike
                w, rc, text = _wall(argv(), envs.get(name, env))
                if rc != 0:
                    raise BenchError(f"inbox {name} exited {rc}: {text[-500:]}")
                if n < WARM:
                    continue
                walls.append(w)
                pairs.append(_wall([sys.executable, "-c", "pass"], env)[0])
                bare_s.append(_wall([sys.executable, "-S", "-c", "pass"], env)[0])
            bare += pairs
            out[name + "_ms"] = round(statistics.median(walls) * 1000, 1)
            # Against the bare starts run between this command's own runs.
            out[name + "_over_python"] = round(
                statistics.median(walls) / statistics.median(pairs), 2
            )
        out["python_ms"] = round(statistics.median(bare) * 1000, 1)
        out["python_S_ms"] = round(statistics.median(bare_s) * 1000, 1)
    return out


# -- sparse, with the memory row beside it -------------------------------------------------


def memory_proc(sessions: int, quick: bool, log: Path) -> subprocess.Popen[bytes]:
    """bench/idle_memory.py as a child: its warm-up and housekeeping waits run beside the
    sparse rows (a memory figure; its CPU is not in any system's process tree)."""
    warm, settle = ("2", "3") if quick else ("61", "61")
    argv = [sys.executable, str(REPO / "bench" / "idle_memory.py"), "--sessions", str(sessions)]
    argv += ["--warm", warm, "--settle", settle]
    with log.open("wb") as fh:
        return subprocess.Popen(argv, cwd=str(REPO), stdout=fh, stderr=subprocess.STDOUT)


def memory_result(proc: subprocess.Popen[bytes], log: Path) -> dict[str, Any]:
    try:
        proc.wait(600)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
        raise BenchError("bench/idle_memory.py did not end in 600 s") from None
    lines = log.read_text(errors="replace").strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise BenchError(f"bench/idle_memory.py exited {proc.returncode}: {lines[-5:]}")
    res: dict[str, Any] = json.loads(lines[-1])
    return res


def sparse_rows(size: dict[str, Any], tmp: Path, idle_s: float) -> dict[str, Any]:
    from bench.cost_sparse import Traffic, bus_housekeeping_s, run_systems

    t = Traffic(
        sessions=size["sessions"],
        seconds=size["sparse_s"],
        rounds=size["rounds"],
        idle_s=idle_s,
        quiet_s=size["quiet_s"],
        housekeeping_s=size.get("housekeeping_s", bus_housekeeping_s()),
    )
    out: dict[str, Any] = {
        "sessions": t.sessions,
        "rate_per_s": t.rate,
        "seconds": t.seconds,
        "rounds": t.rounds,
    }
    out.update(run_systems(tmp, t, ("naive", "minimal", "bus")))
    out["bus_over_naive_rounds"] = [
        round(b / n, 2) if n else None
        for b, n in zip(
            out["bus"]["rounds_cpu_ms_per_msg"], out["naive"]["rounds_cpu_ms_per_msg"], strict=True
        )
    ]
    return out


# -- bursts ------------------------------------------------------------------------------


def burst_rows(size: dict[str, Any], tmp: Path) -> dict[str, Any]:
    """One ``inbox send --jsonl`` to 50 sessions: ingest (no worker) beside raw pipelined
    XADD, and end to end (a 2-process worker, a listener on each session) beside the naive
    task per message, on an embedded server of the run's own."""
    from bench import userpath
    from bench.burst import bench_settings, celery_bus, close_bus
    from bench.swarm import (
        SINK_HOST,
        Ears,
        open_running,
        scenario_naive,
        scenario_raw,
        wire,
        worker,
    )
    from bus.ops.embedded import EmbeddedRedis

    n, sessions, k = size["burst"], 50, 13
    with ExitStack() as stack:
        server = EmbeddedRedis(tmp / "burst.sock", tmp / "burst-redis", persist=False).start()
        stack.callback(server.stop)
        home = tmp / "home-burst"
        home.mkdir()
        s = bench_settings(home, server.url, f"cost{uuid.uuid4().hex[:8]}", own_server=True)
        observer = celery_bus(s)
        stack.callback(close_bus, observer)
        sink = [f"usr{i}" for i in range(sessions)]
        for sid in sink:
            observer.open_session(sid, host=SINK_HOST)
            observer.turn(sid, "start")
        print("burst: raw XADD, ingest...", flush=True)
        raw = scenario_raw(s, n, sessions, k)
        items = [wire(i, k, sink[i % sessions], "ucli") for i in range(n)]
        ingest = userpath.ingest(s, observer, "cli", items, tmp)
        sids = [f"ue2e{i}" for i in range(sessions)]
        open_running(observer, sids)
        ears = Ears(observer, sids)
        stack.callback(ears.stop)
        with worker(s, 2):
            print("burst: naive...", flush=True)
            naive = scenario_naive(s, observer, size["naive"], sessions, k)
            print("burst: end to end...", flush=True)
            ears.reset(sessions)  # warm: one message a session, each noticed
            userpath.cli_send(s, [wire(i, k, sid, "uwarm") for i, sid in enumerate(sids)], tmp)
            if not ears.done.wait(120):
                raise BenchError("the burst's warm-up notices did not all arrive")
            ears.reset(n)
            e2e = userpath.e2e(
                s, "cli", [wire(i, k, sids[i % sessions], "ue2e") for i in range(n)], tmp,
                ears.done.wait,
            )  # fmt: skip
            e2e["notices"] = sum(ears.notices.values())
    return {
        "messages": n,
        "sessions": sessions,
        "raw_per_s": raw["per_s"],
        "ingest_per_s": ingest["per_s"],
        "naive_per_s": naive["per_s"],
        "naive_messages": naive["messages"],
        "e2e_per_s": e2e["per_s"],
        "e2e_notices": e2e["notices"],
        "ingest_over_raw": round(ingest["per_s"] / raw["per_s"], 3),
        "e2e_over_naive": round(e2e["per_s"] / naive["per_s"], 2),
    }


def lone_row(tmp: Path, count: int) -> dict[str, Any]:
    from bench.lone_trips import measure
    from bus.ops.embedded import EmbeddedRedis

    server = EmbeddedRedis(tmp / "lone.sock", tmp / "lone-redis", persist=False).start()
    try:
        # An agent's send names its session (the hooks recorded it): the goal's row. A
        # sender with only a handle (a person, a script) adds its handle's lookup.
        res, _example = measure(server.url, count, 50.0, from_session=True, own_server=True)
        bare, _example = measure(server.url, count, 50.0, own_server=True)
    finally:
        server.stop()
    res["bare_handle"] = {
        k: bare[k] for k in ("worker_trips_median", "worker_scripts_median", "send_to_heard_ms")
    }
    return res


# -- main --------------------------------------------------------------------------------


def server_start(binary: str, tmp: Path, runs: int = 7) -> dict[str, Any]:
    """The binary's version line, its start (spawn to the first PONG on its unix socket,
    median of ``runs``) and an empty server's RSS and ``used_memory``."""
    import redis

    from bench.burst import wait_until

    starts, rss, used = [], [], []
    for _ in range(runs):
        d = tmp / f"start-{uuid.uuid4().hex[:8]}"
        d.mkdir(parents=True)
        sock = d / "s.sock"
        args = [binary, "--port", "0", "--unixsocket", str(sock), "--dir", str(d)]
        began = time.perf_counter()
        proc = subprocess.Popen([*args, "--save", "", "--appendonly", "no"], **_QUIET)
        client = redis.Redis(unix_socket_path=str(sock))
        try:
            wait_until(lambda c=client: _pongs(c), 20, f"{binary} answers", 0.001)
            starts.append((time.perf_counter() - began) * 1000)
            info = client.info("memory")
            used.append(int(info["used_memory"]))
            status = Path(f"/proc/{proc.pid}/status").read_text()
            rss.append(
                int(next(x for x in status.splitlines() if x.startswith("VmRSS")).split()[1])
            )
        finally:
            client.close()
            proc.terminate()
            proc.wait(10)
    version = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.strip()
    return {
        "binary": binary,
        "version": version,
        "start_ms": round(statistics.median(starts), 1),
        "rss_kb": statistics.median(rss),
        "used_memory": statistics.median(used),
    }


_QUIET: dict[str, Any] = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}


def _pongs(client: Any) -> bool:
    try:
        return bool(client.ping())
    except Exception:  # not up yet
        return False


def _servers(given: list[str]) -> list[tuple[str, str]]:
    """``LABEL=PATH`` or ``PATH`` -> ``(label, path)``; each path must be a file."""
    out = []
    for item in given:
        label, _, path = item.rpartition("=")
        if not Path(path).is_file():
            raise SystemExit(f"--server-binary: no such file: {path}")
        out.append((label or Path(path).parent.name or path, path))
    return out


def compare(runs: list[dict[str, Any]]) -> str:
    """Each goal's figure per server run, side by side, and each binary's start row."""
    labels = [r["server"]["label"] for r in runs]
    lines = ["\nservers side by side: " + " | ".join(labels)]
    lines.append(
        "  start ms / RSS KB / used_memory B: "
        + " | ".join(
            f"{r['server']['start_ms']} / {r['server']['rss_kb']} / {r['server']['used_memory']}"
            for r in runs
        )
    )
    for i, goal in enumerate(runs[0]["goals"]):
        figures = " | ".join(str(r["goals"][i]["value"]) for r in runs)
        lines.append(f"  {goal['goal']} ({goal['bound']}): {figures}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke test")
    parser.add_argument("--runs", type=int, help="CLI runs a command (default 20)")
    parser.add_argument("--sparse-s", type=float, help="seconds of sparse traffic (default 60)")
    parser.add_argument("--burst", type=int, help="messages of the burst (default 50,000)")
    parser.add_argument(
        "--idle-s",
        type=float,
        default=None,
        help="idle sample (default 5; the bus's at least its longest periodic pass, 60 s)",
    )
    parser.add_argument(
        "--skip", default="", help="comma list: cli,sparse,lone,burst,memory,durability"
    )
    parser.add_argument(
        "--server-binary",
        action="append",
        default=[],
        metavar="[LABEL=]PATH",
        help="run the rows on this redis-server / valkey-server (repeat: one run each, compared)",
    )
    args = parser.parse_args(argv)
    servers = _servers(args.server_binary)
    size = dict(QUICK if args.quick else FULL)
    for key in ("runs", "sparse_s", "burst"):
        if getattr(args, key) is not None:
            size[key] = getattr(args, key)
    if min(size["runs"], size["burst"]) < 1 or size["sparse_s"] <= 0:
        parser.error("--runs, --burst and --sparse-s must be positive")
    idle_s = args.idle_s if args.idle_s is not None else (0.5 if args.quick else 5.0)
    skip = set(filter(None, args.skip.split(",")))
    unknown = skip - {"cli", "sparse", "lone", "burst", "memory", "durability"}
    if unknown:
        parser.error(f"--skip: unknown rows {sorted(unknown)}")
    signal.signal(signal.SIGTERM, sigterm_exits)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    started = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="inbox-cost-"))
    mem: subprocess.Popen[bytes] | None = None
    runs: list[dict[str, Any]] = []
    try:
        for label, binary in servers or [("", "")]:
            out: dict[str, Any] = {"bench": "cost", "quick": args.quick, "cores": os.cpu_count()}
            here = tmp / f"run{len(runs)}"  # each server's run its own folders
            here.mkdir()
            if binary:
                # Every server this run starts (bus.ops.embedded.server_binary and the
                # stock servers) comes from this binary; its children inherit it.
                os.environ["INBOX_SERVER_BINARY"] = binary
                out["server"] = {"label": label, **server_start(binary, here)}
                print(f"== {label}: {out['server']['version']}", flush=True)
            if "cli" not in skip:
                print("cli...", flush=True)
                out["cli"] = cli_rows(size["runs"], here)
            if "memory" not in skip:
                mem = memory_proc(size["memory"], args.quick, here / "memory.log")
            if "sparse" not in skip:
                out["sparse"] = sparse_rows(size, here, idle_s)
            if "lone" not in skip:
                print("lone delivery...", flush=True)
                out["lone"] = lone_row(here, 20 if args.quick else 200)
            if mem is not None:
                print("memory (idle_memory.py)...", flush=True)
                out["memory"] = memory_result(mem, here / "memory.log")
                mem = None
            if "burst" not in skip:
                out["burst"] = burst_rows(size, here)
            if "durability" not in skip:
                from bench.cost_durability import measure, table

                print("durability...", flush=True)
                out["durability"] = measure(here / "durability", *size["durability"])
                print(table(out["durability"]), flush=True)
            out["goals"] = goals(out)
            out["total_s"] = round(time.perf_counter() - started, 1)
            print(report(out))
            runs.append(out)
        if len(runs) > 1:
            print(compare(runs))
        whole = runs[0] if len(runs) == 1 else {"bench": "cost", "servers": runs}
        print(json.dumps(whole, separators=(",", ":")))
        return 0
    except KeyboardInterrupt:
        print("interrupted; cleaning up", file=sys.stderr)
        return 130
    except BenchError as exc:
        print(f"bench failed: {exc}", file=sys.stderr)
        return 1
    finally:
        if mem is not None and mem.poll() is None:
            mem.send_signal(signal.SIGINT)  # its own clean-up: its servers and worker stop
            try:
                mem.wait(60)
            except subprocess.TimeoutExpired:
                mem.kill()
                mem.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
