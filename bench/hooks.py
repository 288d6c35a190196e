"""Hook and start-up benchmark: what a harness pays at every tool step, and what an
everyday read command costs to answer, beside a bare interpreter.

    python bench/hooks.py [--runs N] [--redis-url URL] [--idle-s S] [--wakes N]
                          [--no-waiter | --waiter-only]

Times, as whole processes, the installed ``inbox`` (the venv's script) in four cases and
``python -S -c pass`` (the same interpreter, no site) in the same run, alternating A B A B
so a drift of the machine's speed hits both alike:

- ``inbox hook claude PostToolUse`` with nothing waiting (the fast path: a look at the
  floor, the standard library only) and with one notice waiting (the full path: drain by
  rename, log, marks recorded in Redis, the notice printed as ``additionalContext``);
- ``inbox drain SID`` with nothing waiting and with one notice waiting;
- the background waiter (``inbox hook claude wait``, armed as Claude Code arms it at a
  turn's end) against a real worker and ``inbox scheduler``: its CPU while armed and idle
  (``/proc/<pid>/stat``, user + system, over ``--idle-s``), and the wake lateness over
  ``--wakes`` wakes: the waiter's exit − the waking blocker's send − the debounce, p50/p99;
- the everyday read commands (``status``, ``threads``, ``read``, ``sent``, ``receipt``,
  ``read-inbox``, ``status --help``) on a session with one thread, each as a user runs it
  (the read lane, bus.lanes.read, where it answers) and on the full command line
  (``INBOX_FAST_READ=0``): the full path's start-up (the imports of the command line and
  the library) is most of what it costs.

A notice is put on the floor before each run of a "waiting" case (not timed): a real
notice, built by the bus from a real message (``deliver_session``), so the drain records
real marks. Prints median and p95 wall per case, the median CPU (user + system of the
child, from ``getrusage``: on a loaded machine CPU says more than wall) and the ratio of
the wall medians to the bare interpreter's. Redis: ``--redis-url``, else ``INBOX_BENCH_REDIS_URL``, else
127.0.0.1:6379; keys live under a fresh prefix, deleted at the end, as is the temp home.
"""

from __future__ import annotations

import argparse
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
from collections.abc import Callable
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bus.api import Bus  # noqa: E402
from bus.core.settings import Settings  # noqa: E402
from bus.delivery.dispatch import NullDispatcher  # noqa: E402
from tests.support.worker_proc import WorkerProcess  # noqa: E402

SID = "bench-hooks"
PEER = "bench-peer"
INBOX = Path(sys.executable).parent / "inbox"


def _children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def timed(argv: list[str], env: dict[str, str], stdin: str) -> tuple[float, float]:
    """One whole-process run: (wall seconds, CPU seconds of the child)."""
    cpu, start = _children_cpu(), time.perf_counter()
    subprocess.run(argv, env=env, input=stdin, capture_output=True, text=True, check=False)
    return time.perf_counter() - start, _children_cpu() - cpu


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


AGENT = "claude-code_2-1-332_bench"  # a Claude Code that runs asyncRewake hooks


def _proc_cpu(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (``/proc/<pid>/stat`` fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Armed:
    """One ``inbox hook claude wait`` for ``sid``, started as Claude Code starts it."""

    def __init__(self, bus: Bus, sid: str, env: dict[str, str]) -> None:
        log = bus.floor.session_dir(sid, create=True) / "waiter.log"
        before = log.read_text().count(" listening") if log.exists() else 0
        self.proc = subprocess.Popen(
            [str(INBOX), "hook", "claude", "wait"],
            env={**env, "AI_AGENT": AGENT},
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"session_id": sid, "hook_event_name": "Stop"}))
        self.proc.stdin.close()
        deadline = time.monotonic() + 60
        while not (log.exists() and log.read_text().count(" listening") > before):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the waiter did not start listening")
            time.sleep(0.01)  # set-up, not measured

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)


def bench_waiter(url: str, idle_s: float, wakes: int) -> None:
    """The waiter's idle CPU and its wake lateness, on a worker and a scheduler of its own."""
    from workers.app import make_app
    from workers.dispatch import CeleryDispatcher

    prefix = f"benchwait{uuid.uuid4().hex[:8]}"
    home = Path(tempfile.mkdtemp(prefix="ibw-"))  # short: the socket's path is capped
    settings = Settings(
        home=home,
        host="bench",
        redis_url=url,
        broker_url=url,
        key_prefix=prefix,
        fyi_flush_s=600.0,
        memory_settings=False,
    )
    env = settings.child_env()
    worker = WorkerProcess(settings)
    scheduler = subprocess.Popen(
        [str(INBOX), "scheduler"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    bus = Bus(settings, dispatcher=CeleryDispatcher(make_app(settings)))
    sid = "bench-waiter"
    debounce = settings.wake_debounce_s
    try:
        bus.open_session(sid)
        armed = Armed(bus, sid, env)
        cpu0, t0 = _proc_cpu(armed.proc.pid), time.monotonic()
        time.sleep(idle_s)  # the measurement: the waiter left alone, armed
        cpu, span = _proc_cpu(armed.proc.pid) - cpu0, time.monotonic() - t0
        assert armed.proc.poll() is None, "the waiter exited while idle"
        armed.stop()
        print(f"\nwaiter armed and idle for {span:.1f} s: {cpu:.3f} s CPU ({cpu / span:.4%})")

        late: list[float] = []
        for n in range(wakes):
            bus.turn(sid, "end", answer="done")  # what the Stop hook records
            armed = Armed(bus, sid, env)
            sent = time.monotonic()
            bus.send(
                {"from": "bench:lead", "to_id": sid, "text": f"blocked {n}", "class": "blocker"}
            )
            code = armed.proc.wait(60)
            late.append(time.monotonic() - sent - debounce)
            if code != 2:
                raise RuntimeError(
                    f"the waiter exited {code}: {armed.proc.stderr.read() if armed.proc.stderr else ''}"
                )
            armed.stop()
        print(
            f"wake lateness over {wakes} wakes (exit - send - {debounce:g} s debounce):"
            f" p50 {percentile(late, 0.5):.3f} s, p99 {percentile(late, 0.99):.3f} s,"
            f" max {max(late):.3f} s"
        )
    finally:
        scheduler.terminate()
        scheduler.wait(30)
        worker.stop()
        client = redis.Redis.from_url(url)
        for key in client.scan_iter(match=f"*{prefix}*", count=1000):
            client.delete(key)
        client.close()
        shutil.rmtree(home, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30, help="timed runs of each case")
    parser.add_argument("--redis-url", default=None)
    parser.add_argument("--idle-s", type=float, default=60.0, help="the armed waiter left idle")
    parser.add_argument("--wakes", type=int, default=50, help="wakes timed for the lateness")
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--no-waiter", action="store_true", help="skip the waiter")
    only.add_argument("--waiter-only", action="store_true", help="only the waiter")
    args = parser.parse_args()
    url = args.redis_url or os.environ.get("INBOX_BENCH_REDIS_URL") or "redis://127.0.0.1:6379/0"
    if not args.waiter_only:
        bench_hooks(url, args.runs)
    if not args.no_waiter:
        bench_waiter(url, args.idle_s, args.wakes)
    return 0


def bench_hooks(url: str, runs: int) -> None:
    """The hook, drain and read commands beside a bare interpreter."""
    prefix = f"benchhooks{uuid.uuid4().hex[:8]}"
    home = Path(tempfile.mkdtemp(prefix="inbox-bench-hooks-"))
    settings = Settings(home=home, host="bench", redis_url=url, key_prefix=prefix)
    env = {k: v for k, v in os.environ.items() if not k.startswith("INBOX_")}
    env.update(settings.to_env())
    env["INBOX_DISPATCHER"] = "none"
    bus = Bus(settings, dispatcher=NullDispatcher())
    try:
        bus.open_session(SID)
        bus.turn(SID, "start")
        bus.open_session(PEER)
        first = bus.send(
            {"from": f"bench:{PEER}", "from_session": PEER, "to_id": SID, "text": "a thread"}
        )

        def notice() -> None:
            bus.send({"from": "bench:peer", "to_id": SID, "text": "CI is red on main"})
            bus.deliver_session(SID)  # a running session: one notice on the floor now
            assert any(x.get("kind") == "notice" for x in bus.floor.peek(SID))

        payload = json.dumps(
            {
                "session_id": SID,
                "transcript_path": str(home / "t.jsonl"),
                "cwd": str(home),
                "hook_event_name": "PostToolUse",
                "tool_name": "Bash",
                "tool_input": {"command": "ls"},
                "tool_response": {"stdout": "", "stderr": "", "interrupted": False},
            }
        )
        bus.deliver_session(SID)  # the thread is in SID's threads
        reads = [
            ("status", ["status"]),
            ("threads SID", ["threads", SID]),
            ("read SID THREAD", ["read", SID, str(first["thread"])]),
            ("sent SID", ["sent", PEER]),
            ("receipt ID", ["receipt", str(first["id"]), "--by", PEER]),
            ("read-inbox SID", ["read-inbox", SID]),
            ("status --help", ["status", "--help"]),
        ]
        hook = [str(INBOX), "hook", "claude", "PostToolUse"]
        drain = [str(INBOX), "drain", SID]
        full_env = {**env, "INBOX_FAST_READ": "0"}
        cases: list[tuple[str, list[str], str, Callable[[], None] | None, dict[str, str]]] = [
            ("hook PostToolUse, nothing waiting", hook, payload, None, env),
            ("hook PostToolUse, one notice", hook, payload, notice, env),
            ("drain, nothing waiting", drain, "", None, env),
            ("drain, one notice", drain, "", notice, env),
            *((name, [str(INBOX), *argv], "", None, env) for name, argv in reads),
            *((f"{name} (full)", [str(INBOX), *argv], "", None, full_env) for name, argv in reads),
        ]
        bare = [sys.executable, "-S", "-c", "pass"]
        print(f"{runs} runs each, alternating with `python -S -c pass`; seconds")
        print(f"{'case':36} {'median':>8} {'p95':>8} {'cpu med':>8} {'bare med':>9} {'ratio':>7}")
        for name, argv, stdin, prepare, case_env in cases:
            if prepare is None:
                bus.drain(SID)  # nothing waits
            a: list[float] = []
            b: list[float] = []
            cpu: list[float] = []
            for i in range(runs + 1):  # the first pair warms the caches, not counted
                if prepare is not None:
                    prepare()
                (ta, ca), (tb, _) = timed(argv, case_env, stdin), timed(bare, env, "")
                if i:
                    a.append(ta)
                    b.append(tb)
                    cpu.append(ca)
            ma, mb, mc = statistics.median(a), statistics.median(b), statistics.median(cpu)
            print(f"{name:36} {ma:8.4f} {p95(a):8.4f} {mc:8.4f} {mb:9.4f} {ma / mb:7.2f}")
    finally:
        client = redis.Redis.from_url(url)
        for key in client.scan_iter(match=f"{prefix}:*", count=1000):
            client.delete(key)
        client.close()
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
