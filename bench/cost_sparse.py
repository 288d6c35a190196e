"""Sparse swarm traffic for ``bench/cost.py``: CPU a message of three systems, each on its
own redis-server, at the same Poisson arrivals to the same listening sessions.

- **naive**: a plain Celery worker (2 prefork children, nothing of the bus loaded) with one
  task per message that writes the message's line the way the bus does (``Floor.write_line``:
  the session's socket if its listener acks, else its JSONL file);
- **minimal**: one Python process ``XREAD``-ing one stream and writing each entry's line
  to its session's socket the same way (``python -m bench.cost_sparse consume URL HOME``);
- **bus**: ``inbox up`` as a user runs it (worker, scheduler, supervisor, standbys), its
  ``INBOX_HOME`` a temp dir and ``INBOX_REDIS_URL`` its own server; the bench process opens
  the sessions and sends with the library's ``Bus.send``.

The listeners are the bench's (``swarm.Ears``: the real listener, acking), so are the sends:
neither is charged. The three systems are up side by side, each on its own server. Their
idle rates are sampled together, over ``idle_s`` and at least :func:`bus_housekeeping_s`
(so the bus's periodic passes fall in the sample as often as in the traffic), with every
system up, settled and warm and nothing sent. Then the traffic goes in rounds: each round
draws Poisson arrivals and sends the same ones to each system in turn, the order rotated
round by round, so a stretch when the machine runs slower weighs on every system alike.
Each window charges its system the ``/proc`` CPU (utime + stime) of its process tree from
its first send until every message was heard, plus its redis-server's CPU, each beyond
the system's idle rate over the window. The gross figure, the processes not net of their
idle rate, is kept beside, and so is each round's figure.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from bench.burst import BenchError, broker_for, close_bus, wait_until
from bench.cpu_share import TICK, tree
from bench.swarm import Ears, open_running, percentiles, wire
from bus.core.settings import SOURCE_ROOT, Settings
from tests.support.local_servers import stock_binary

HOST = "costbench"
NAIVE_QUEUE = "naive"
STREAM = "cost:minimal"


class Server:
    """A stock redis-server of one system's own on a unix socket, persistence off."""

    def __init__(self, tmp: Path, name: str) -> None:
        d = tmp / f"redis-{name}"
        d.mkdir(parents=True)
        self.sock = d / "redis.sock"
        args = [stock_binary(), "--port", "0", "--unixsocket", str(self.sock)]
        args += ["--unixsocketperm", "700", "--dir", str(d), "--save", "", "--appendonly", "no"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"unix://{self.sock}"
        client = redis.Redis.from_url(self.url)
        try:
            wait_until(lambda: _pings(client), 20, f"redis-server for {name}", 0.05)
        finally:
            client.close()

    def ticks(self) -> int:
        return tree(self.proc.pid).get(self.proc.pid, 0)

    def commands(self) -> dict[str, tuple[int, int]]:
        """``INFO commandstats`` now: per command, (calls, server µs). A script's own
        commands are counted too, each under its name, as well as the script's call."""
        client = redis.Redis.from_url(self.url)
        try:
            got = client.info("commandstats")
        finally:
            client.close()
        return {
            k.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"])) for k, v in got.items()
        }

    def stop(self) -> None:
        _stop(self.proc)


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except (redis.RedisError, OSError):
        return False


def _stop(proc: subprocess.Popen[Any], timeout: float = 20.0) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def tree_ticks(pid: int) -> int:
    """CPU ticks of ``pid`` and its descendants now (redis-servers left out)."""
    return sum(t for p, t in tree(pid).items() if b"redis-server" not in _cmdline(p))


def settle(
    root: int, timeout: float, spares: int = 0, quiet_s: float = 3.0, cores: float = 0.05
) -> None:
    """Until the tree's start-up is over: ``spares`` standby processes up (``inbox up``
    starts its imported spares a few seconds after it answers) and under ``cores`` over
    ``quiet_s``;
    at most ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sum(1 for p in tree(root) if b"standby" in _cmdline(p)) < spares:
            time.sleep(0.5)
            continue
        p0, t0 = tree_ticks(root), time.perf_counter()
        time.sleep(quiet_s)
        if (tree_ticks(root) - p0) / TICK / (time.perf_counter() - t0) < cores:
            return


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


# -- the three systems: each yields (send one message, process-tree root pid) -------------

# Send one message; the id it is heard by (the bus's answer names it: an agent's send
# carries no id of its own, so the bus's send is given none).
Send = Callable[[dict[str, Any]], str]


def inbox_env(home: Path, url: str) -> dict[str, str]:
    return {
        **os.environ,
        "INBOX_HOME": str(home),
        "INBOX_HOST": HOST,
        "INBOX_REDIS_URL": url,
        "INBOX_BROKER_URL": broker_for(url),
        "PYTHONPATH": str(SOURCE_ROOT),
    }


@contextmanager
def naive_system(home: Path, url: str, log: Path) -> Iterator[tuple[Send, int]]:
    from celery import Celery

    argv = [sys.executable, "-m", "celery", "-A", "bench.naive_plain", "worker", "-Q"]
    argv += [NAIVE_QUEUE, "-c", "2", "-P", "prefork", "--loglevel", "info"]
    argv += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
    proc = _spawn(argv, inbox_env(home, url), log)
    app = Celery("naive-sender", broker=broker_for(url))
    try:
        _until(lambda: _logged(log, " ready."), 60, "the naive worker's ready", proc, log)

        def send(m: dict[str, Any]) -> str:
            app.send_task("bench.naive_plain", args=[m["to_id"], m], queue=NAIVE_QUEUE)
            return str(m["id"])

        yield send, proc.pid
    finally:
        app.close()
        _stop(proc)


@contextmanager
def minimal_system(home: Path, url: str, log: Path) -> Iterator[tuple[Send, int]]:
    import json

    argv = [sys.executable, "-m", "bench.cost_sparse", "consume", url, str(home)]
    proc = _spawn(argv, inbox_env(home, url), log)
    r = redis.Redis.from_url(url)
    try:
        _until(lambda: _logged(log, "consuming"), 30, "the minimal consumer", proc, log)

        def send(m: dict[str, Any]) -> str:
            r.xadd(STREAM, {"sid": m["to_id"], "line": json.dumps(m)})
            return str(m["id"])

        yield send, proc.pid
    finally:
        r.close()
        _stop(proc)


@contextmanager
def bus_system(home: Path, url: str, log: Path, sids: list[str]) -> Iterator[tuple[Send, int]]:
    from bench.burst import celery_bus

    proc = _spawn([str(Path(sys.executable).parent / "inbox"), "up"], inbox_env(home, url), log)
    s = sender_settings(home, url)
    b = celery_bus(s)
    try:

        def beating() -> bool:
            roles = {w["role"] for w in b.status()["workers"]}
            return roles >= {"scheduler", "worker"}

        _until(beating, 90, "inbox up's worker and scheduler heartbeats", proc, log)
        open_running(b, sids, host=HOST)
        for lane in range(7):  # the senders' sessions (their messages name them)
            b.open_session(f"lane{lane}", handle=f"bench:lane{lane}", host=HOST)

        def send(m: dict[str, Any]) -> str:
            # As an agent's `inbox send` or MCP send: no id of the caller's (an id given is
            # checked against its owner first, a round trip agents do not pay).
            return str(b.send({k: v for k, v in m.items() if k != "id"})["id"])

        yield send, proc.pid
    finally:
        close_bus(b)
        _stop(proc, 30)


def sender_settings(home: Path, url: str) -> Settings:
    """The bench's side of the bus (`inbox up` reads the same from its environment): the
    flood bounds off, as the senders of the other systems have none."""
    return Settings(
        home=home,
        host=HOST,
        redis_url=url,
        broker_url=broker_for(url),
        send_rate=0.0,
        max_unread=0,
    )


def _spawn(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as fh:
        return subprocess.Popen(
            argv, env=env, cwd=str(SOURCE_ROOT), stdout=fh, stderr=subprocess.STDOUT
        )


def _until(
    ok: Callable[[], bool], timeout: float, what: str, proc: subprocess.Popen[bytes], log: Path
) -> None:
    """Wait for ``ok``; a child that exits meanwhile ends the wait with its log's tail."""

    def ready() -> bool:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-1500:] if log.exists() else ""
            raise BenchError(f"{what}: the process exited {proc.returncode}:\n{tail}")
        return ok()

    wait_until(ready, timeout, what, 0.1)


def _logged(log: Path, word: str) -> bool:
    return log.exists() and word in log.read_text(errors="replace")


# -- the run ---------------------------------------------------------------------------


@dataclass
class Traffic:
    sessions: int = 200
    rate: float = 20.0
    seconds: float = 60.0  # of traffic to each system, split over the rounds
    rounds: int = 3
    idle_s: float = 5.0
    # The idle sample spans at least the bus's longest periodic pass (bus_housekeeping_s),
    # so that pass's cost is idle cost, not charged to the messages it happened beside.
    housekeeping_s: float = 0.0
    quiet_s: float = 3.0  # the start-up is over once the system is this long quiet
    seed: int = 37


@dataclass
class System:
    """One system up on its own server, its sessions listened to by the bench."""

    name: str
    server: Server
    ears: Ears
    send: Send
    root: int
    sids: list[str]

    def ticks(self) -> tuple[int, int]:
        """CPU ticks so far: (its process tree, its redis-server)."""
        return tree_ticks(self.root), self.server.ticks()


@dataclass
class Window:
    """One round's traffic to one system: what it cost and when each message was heard."""

    messages: int
    seconds: float
    proc_ticks: int
    redis_ticks: int
    heard_ms: list[float]
    notices: int
    commands: dict[str, tuple[int, int]]  # the server's, over the window: (calls, µs)


def start_system(name: str, tmp: Path, t: Traffic, stack: ExitStack) -> System:
    """``name`` up on a server of its own (stopped by ``stack``), settled and warm."""
    home = tmp / f"home-{name}"
    home.mkdir(parents=True)
    sids = [f"sp{i}" for i in range(t.sessions)]
    server = Server(tmp, name)
    stack.callback(server.stop)
    log = tmp / f"{name}.log"
    from bus.delivery.floor import Floor

    class _Floor:  # what Ears needs of a Bus: its floor
        floor = Floor(home)

    ears = Ears(_Floor(), sids)  # type: ignore[arg-type]
    stack.callback(ears.stop)
    if name == "naive":
        send, root = stack.enter_context(naive_system(home, server.url, log))
    elif name == "minimal":
        send, root = stack.enter_context(minimal_system(home, server.url, log))
    else:
        send, root = stack.enter_context(bus_system(home, server.url, log, sids))
    settle(
        root, 60.0 if name == "bus" else 20.0, spares=2 if name == "bus" else 0, quiet_s=t.quiet_s
    )
    # Warm: a message to a few sessions (connections, scripts, the pool's children).
    ears.reset(10)
    for i in range(10):
        send(wire(i, 1, sids[i], f"warm{name}"))
    if not ears.done.wait(60):
        raise BenchError(f"{name}: the warm-up messages were not heard")
    return System(name, server, ears, send, root, sids)


def idle_rates(systems: list[System], seconds: float) -> dict[str, tuple[float, float]]:
    """Each system's (processes, redis-server) cores over the same ``seconds``, nothing
    sent to any: sampled side by side, so each system's idle rate is read in one sample."""
    before = {s.name: s.ticks() for s in systems}
    i0 = time.perf_counter()
    time.sleep(seconds)
    wall = time.perf_counter() - i0
    out = {}
    for s in systems:
        (p0, r0), (p1, r1) = before[s.name], s.ticks()
        out[s.name] = ((p1 - p0) / TICK / wall, (r1 - r0) / TICK / wall)
    return out


def arrivals(t: Traffic, seconds: float, seed: int) -> list[tuple[float, int]]:
    """Poisson arrivals over ``seconds``: (offset s, session index)."""
    rng = random.Random(seed)
    at, out = 0.0, []
    while (at := at + rng.expovariate(t.rate)) < seconds:
        out.append((at, rng.randrange(t.sessions)))
    return out


def run_window(s: System, due: list[tuple[float, int]], tag: str) -> Window:
    """Send ``due`` to ``s`` on time; charge it until every message was heard."""
    n = len(due)
    s.ears.reset(n)
    sent_at: dict[str, float] = {}
    c0 = s.server.commands()
    (p0, r0), t0 = s.ticks(), time.perf_counter()
    for i, (offset, to) in enumerate(due):
        delay = t0 + offset - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        m = wire(i, 7, s.sids[to], tag)
        m["from_session"] = f"lane{i % 7}"  # agents send from their sessions
        at = time.perf_counter()
        sent_at[s.send(m)] = at
    if not s.ears.done.wait(60):
        raise BenchError(f"{s.name}: {len(s.ears.covered)} of {n} messages heard")
    t1 = time.perf_counter()
    p1, r1 = s.ticks()
    c1 = s.server.commands()
    with s.ears.lock:
        heard = [(s.ears.seen_at[mid] - t) * 1000 for mid, t in sent_at.items()]
        notices = sum(s.ears.notices.values())
    used = {k: (c - c0.get(k, (0, 0))[0], u - c0.get(k, (0, 0))[1]) for k, (c, u) in c1.items()}
    return Window(n, t1 - t0, p1 - p0, r1 - r0, heard, notices, used)


SCRIPT_COMMANDS = ("evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro")


def server_commands(w: list[Window]) -> dict[str, Any]:
    """The server's commands a message over windows ``w`` (``INFO commandstats``): all of
    them (a script's own commands counted as well), the script calls, a script call's
    server µs (its own commands' time within it), and the most called commands."""
    n = sum(x.messages for x in w)
    calls: dict[str, int] = {}
    usec: dict[str, int] = {}
    for x in w:
        for k, (c, u) in x.commands.items():
            calls[k] = calls.get(k, 0) + c
            usec[k] = usec.get(k, 0) + u
    scripts = sum(calls.get(k, 0) for k in SCRIPT_COMMANDS)
    script_us = sum(usec.get(k, 0) for k in SCRIPT_COMMANDS)
    return {
        "server_commands_per_msg": round(sum(calls.values()) / n, 2),
        "script_calls_per_msg": round(scripts / n, 2),
        "script_us_per_call": round(script_us / scripts, 1) if scripts else None,
        "top_commands_per_msg": {
            k: round(calls[k] / n, 2) for k in sorted(calls, key=lambda k: -calls[k])[:8]
        },
    }


def net_ms(w: list[Window], idle: tuple[float, float]) -> tuple[float, float, float]:
    """(processes, Redis, gross processes) CPU ms a message over windows ``w``: each side
    beyond its idle rate over the windows' time, the gross figure not net of idle."""
    n = sum(x.messages for x in w)
    secs = sum(x.seconds for x in w)
    procs = sum(x.proc_ticks for x in w) / TICK
    rds = sum(x.redis_ticks for x in w) / TICK
    return (
        max(0.0, procs - idle[0] * secs) * 1000 / n,
        max(0.0, rds - idle[1] * secs) * 1000 / n,
        procs * 1000 / n,
    )


def run_systems(tmp: Path, t: Traffic, names: tuple[str, ...]) -> dict[str, Any]:
    """The systems up side by side, each on its own server; their idle rates sampled
    together; then ``t.rounds`` rounds, each the same Poisson arrivals to every system in
    turn (the order rotated each round), so a machine that is faster or slower for a
    while weighs on every system alike. Per system, one row over all its windows; the
    bus ÷ naive ratio of each round beside."""
    with ExitStack() as stack:
        systems = []
        for name in names:
            print(f"sparse: {name} up...", flush=True)
            systems.append(start_system(name, tmp, t, stack))
        time.sleep(1.0)  # the warm-ups' tail (acks, counters) out of the idle sample
        idle_s = max(t.idle_s, t.housekeeping_s) if "bus" in names else t.idle_s
        print(f"sparse: idle sample, {idle_s:.0f} s...", flush=True)
        idle = idle_rates(systems, idle_s)
        windows: dict[str, list[Window]] = {s.name: [] for s in systems}
        per_round = t.seconds / t.rounds
        for r in range(t.rounds):
            due = arrivals(t, per_round, t.seed + r)
            order = systems[r % len(systems) :] + systems[: r % len(systems)]
            print(f"sparse: round {r + 1} of {t.rounds}, {len(due)} messages each...", flush=True)
            for s in order:
                windows[s.name].append(run_window(s, due, f"sp{s.name}r{r}"))
        time.sleep(1.0)  # the last deliveries' tail out of the idle sample after
        after = idle_rates(systems, t.idle_s)
    out: dict[str, Any] = {}
    for name, w in windows.items():
        proc_ms, redis_ms, gross_ms = net_ms(w, idle[name])
        out[name] = {
            "messages": sum(x.messages for x in w),
            "window_s": round(sum(x.seconds for x in w), 2),
            "idle_s": idle_s,
            "cpu_ms_per_msg": round(proc_ms + redis_ms, 3),
            "process_ms_per_msg": round(proc_ms, 3),
            "redis_ms_per_msg": round(redis_ms, 3),
            "gross_cpu_ms_per_msg": round(gross_ms + redis_ms, 3),
            "rounds_cpu_ms_per_msg": [round(sum(net_ms([x], idle[name])[:2]), 3) for x in w],
            "idle_cores_processes": round(idle[name][0], 4),
            "idle_cores_redis": round(idle[name][1], 4),
            # The same after the traffic: how steady the idle cost subtracted is.
            "idle_after_cores_processes": round(after[name][0], 4),
            "idle_after_cores_redis": round(after[name][1], 4),
            "heard_ms": percentiles([h for x in w for h in x.heard_ms]),
            "notices": sum(x.notices for x in w),
            **server_commands(w),
        }
    return out


def bus_housekeeping_s() -> float:
    """The longest period of the bus's own passes with nothing sent: the receipts' expiry,
    the server's memory check, the streams' compaction."""
    from bus.delivery.receipts import EXPIRE_EVERY_S
    from bus.store.compaction import COMPACT_EVERY_S
    from bus.store.server_memory import CHECK_EVERY_S

    return max(EXPIRE_EVERY_S, COMPACT_EVERY_S, CHECK_EVERY_S)


def consume(url: str, home: str) -> int:
    """The minimal system's consumer: XREAD one stream, each entry's line to its socket."""
    import json

    from bus.delivery.floor import Floor

    floor = Floor(Path(home))
    r: Any = redis.Redis.from_url(url)
    last = "0-0"  # the stream is the run's own: from its start, so nothing slips between reads
    print("consuming", flush=True)
    while True:
        got = r.xread({STREAM: last}, count=100, block=1000)
        for _stream, entries in got or []:
            for eid, fields in entries:
                floor.write_line(fields[b"sid"].decode(), json.loads(fields[b"line"]))
                last = eid


if __name__ == "__main__":
    if sys.argv[1:2] == ["consume"]:
        sys.exit(consume(sys.argv[2], sys.argv[3]))
