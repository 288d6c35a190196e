"""What one ``inbox send`` costs as a process, warm and cold, beside a bare interpreter.

    python bench/cli_send.py [--runs 20] [--redis-url URL]

Times, as whole processes, the venv's ``inbox send --to-id PEER --from H:me --text hi``
handed to a running command server (bus.surfaces.command_server, the one ``inbox up``
keeps), the same send cold (``INBOX_FAST_SEND=0``: the process imports the command line and
the library), ``inbox reply`` warm, and ``python -c pass`` of the same venv, in turn (A B C
D A B C D ...) so a drift of the machine's speed hits all alike. Prints the median wall
and CPU (user + system of the child, ``getrusage``) of each, and each median's ratio to the
bare interpreter's: the warm send's goal is at most 1.5.

Byte-compiled modules are what an install has; a tree whose ``__pycache__`` was never
written (``PYTHONDONTWRITEBYTECODE`` in the environment) compiles the entry point on every
run, so the bench compiles ``bus`` first. Redis: ``--redis-url``, else
``INBOX_BENCH_REDIS_URL``, else 127.0.0.1:6379; keys under a fresh prefix, deleted at the
end, as is the temporary home. The send rate limit is lifted for the bench's sender.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bus.surfaces.command_server import socket_path  # noqa: E402

INBOX = Path(sys.executable).parent / "inbox"


def _children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """One whole-process run: (wall seconds, CPU seconds of the child, exit code)."""
    cpu, start = _children_cpu(), time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, check=False, timeout=60)
    return time.perf_counter() - start, _children_cpu() - cpu, done.returncode


def _start_server(env: dict[str, str]) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "bus.surfaces.command_server"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # "ready" once it listens
    if "ready" not in line:
        proc.kill()
        raise SystemExit(f"the command server did not start: {line}{proc.stdout.read()}")
    return proc


def bench(url: str, runs: int) -> None:
    compileall.compile_dir(str(ROOT / "bus"), quiet=1)
    home = Path(tempfile.mkdtemp(prefix="ibs-"))
    prefix = f"bench{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "INBOX_HOME": str(home),
        "INBOX_HOST": "bench",
        "INBOX_REDIS_URL": url,
        "INBOX_KEY_PREFIX": prefix,
        "INBOX_SEND_RATE": "1000000",
        "INBOX_SEND_BURST": "1000000",
    }
    env.pop("INBOX_SESSION", None)
    env.pop("INBOX_FAST_SEND", None)
    server = None
    try:
        for sid in ("me", "peer"):
            subprocess.run(
                [str(INBOX), "session", "open", sid], env=env, check=True, capture_output=True
            )
        server = _start_server(env)
        assert socket_path(home).exists()
        send = [str(INBOX), "send", "--to-id", "peer", "--from", "bench:me", "--text", "hi"]
        ask = [str(INBOX), "request", "--to-id", "peer", "--type", "task", "--text", "do"]
        asked = subprocess.run(
            ask, env={**env, "INBOX_SESSION": "me"}, check=True, capture_output=True, text=True
        )
        thread = json.loads(asked.stdout)["thread"]
        cases = {
            "inbox send (warm)": (send, env),
            "inbox send (cold, INBOX_FAST_SEND=0)": (send, {**env, "INBOX_FAST_SEND": "0"}),
            "inbox reply (warm)": ([str(INBOX), "reply", "me", thread, "--text", "ok"], env),
            "python -c pass": ([sys.executable, "-c", "pass"], env),
        }
        for argv, case_env in cases.values():  # one untimed run each: caches warm
            timed(argv, case_env)
        walls: dict[str, list[float]] = {name: [] for name in cases}
        cpus: dict[str, list[float]] = {name: [] for name in cases}
        failed: dict[str, int] = {name: 0 for name in cases}
        for _ in range(runs):
            for name, (argv, case_env) in cases.items():
                wall, cpu, code = timed(argv, case_env)
                walls[name].append(wall)
                cpus[name].append(cpu)
                failed[name] += code != 0
        bare_wall = statistics.median(walls["python -c pass"])
        bare_cpu = statistics.median(cpus["python -c pass"])
        print(f"{runs} runs each, alternating; medians (ratio to python -c pass)")
        print(f"{'case':40} {'wall ms':>9} {'ratio':>6} {'cpu ms':>8} {'ratio':>6}")
        for name in cases:
            wall, cpu = statistics.median(walls[name]), statistics.median(cpus[name])
            note = f"  ({failed[name]} runs failed)" if failed[name] else ""
            print(
                f"{name:40} {wall * 1000:9.1f} {wall / bare_wall:6.2f} "
                f"{cpu * 1000:8.1f} {cpu / bare_cpu if bare_cpu else 0:6.2f}{note}"
            )
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        client = redis.Redis.from_url(url)
        for key in client.scan_iter(match=f"{prefix}:*", count=1000):
            client.delete(key)
        client.close()
        shutil.rmtree(home, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="timed runs of each case")
    parser.add_argument("--redis-url", default=None)
    args = parser.parse_args()
    url = args.redis_url or os.environ.get("INBOX_BENCH_REDIS_URL") or "redis://127.0.0.1:6379/0"
    bench(url, args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
