"""Burst benchmark: N agent messages from K senders, the inbox against its baselines.

    python bench/burst.py [--messages N] [--senders K] [--repeat R] [--redis-url URL]

Everything is measured in the same run, against one real ``inbox worker`` (Celery,
prefork, 2 processes) and one Redis, and reported as ratios against baselines measured
the same way, so the figures mean something on any machine:

- **A, bus, running session**: a session mid-turn takes a burst through ``Bus.send``;
  it should hear ONE notice and no turn is caused.
- **B, bus, idle session**: an idle session takes a burst of blockers; the debounced
  wake (0.5 s here) should make it ONE turn.
- **naive**: a Celery task per message, each written as its own floor line
  (``bench/naive.py``): one turn per message.
- **raw XADD**: one XADD per message of the same wire JSON, one round trip each: the
  floor of what storing a message costs.

Redis: ``--redis-url``, else ``INBOX_BENCH_REDIS_URL``, else 127.0.0.1:6379 if it
answers, else an embedded redis-server in a temp dir. Every key lives under a fresh
prefix and is deleted at the end; the worker, the scheduler thread, the embedded Redis
and the temp dir are stopped and removed even on Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import redis  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from bus.api import Bus  # noqa: E402
from bus.core.models import now_ms, parse_message  # noqa: E402
from bus.core.settings import Settings  # noqa: E402
from bus.delivery.scheduler import run as run_scheduler  # noqa: E402
from bus.ops.embedded import EmbeddedRedis  # noqa: E402
from bus.surfaces.cli.app import worker_argv  # noqa: E402
from tests.support.worker_proc import WorkerProcess  # noqa: E402
from workers.app import host_queue, make_app  # noqa: E402
from workers.dispatch import CeleryDispatcher  # noqa: E402

BENCH_HOST = "bench"
DEBOUNCE_S = 0.5
DEFAULT_URL = "redis://127.0.0.1:6379/0"
STARTED = "embedded, started for this run"  # pick_redis's word for a server of the bench's own
POLL_S = 0.005


class BenchError(RuntimeError):
    """A scenario did not reach its end state in time."""


# -- Redis ---------------------------------------------------------------------------------


def _answers(url: str) -> bool:
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=0.5)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except (redis.RedisError, OSError, ValueError):
        return False


def broker_for(url: str) -> str:
    """Kombu spells a unix-socket Redis ``redis+socket://``."""
    if url.startswith("unix://"):
        return "redis+socket://" + url[len("unix://") :].split("?", 1)[0]
    return url


def pick_redis(arg: str | None, tmp: Path, stack: ExitStack) -> tuple[str, str]:
    """(url, how it was found); starts an embedded server when nothing answers."""
    url = arg or os.environ.get("INBOX_BENCH_REDIS_URL")
    if url:
        if not _answers(url):
            raise BenchError(f"Redis at {url} does not answer")
        return url, "given"
    if _answers(DEFAULT_URL):
        return DEFAULT_URL, "already running"
    server = EmbeddedRedis(tmp / "redis.sock", tmp / "redis", persist=False).start()
    stack.callback(server.stop)
    return server.url, STARTED


def delete_prefix(url: str, prefix: str) -> int:
    client = redis.Redis.from_url(url, socket_connect_timeout=2)
    deleted = 0
    try:
        batch: list[bytes] = []
        for key in client.scan_iter(match=f"{prefix}:*", count=1000):
            batch.append(key)
            if len(batch) >= 500:
                deleted += int(client.delete(*batch))
                batch = []
        if batch:
            deleted += int(client.delete(*batch))
    finally:
        client.close()
    return deleted


# -- the worker ----------------------------------------------------------------------------


def child_env(s: Settings) -> dict[str, str]:
    """The environment that makes a child process use these settings."""
    return s.child_env()


def start_worker(s: Settings, concurrency: int = 2) -> WorkerProcess:
    """The bench host's worker: ``inbox worker``'s argv plus ``-I bench.naive``."""
    argv = [*worker_argv(s, concurrency, "prefork", "info"), "-I", "bench.naive"]
    try:
        return WorkerProcess(s, [sys.executable, "-m", "celery", "-A", "workers", *argv])
    except RuntimeError as exc:
        raise BenchError(str(exc)) from exc


@contextmanager
def scheduler_thread(s: Settings) -> Iterator[None]:
    """``inbox scheduler``'s loop in a thread, with its own connection."""
    b = celery_bus(s)
    stop = threading.Event()
    thread = threading.Thread(
        target=run_scheduler, args=(b, stop), kwargs={"max_sleep_s": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)
        close_bus(b)


def celery_bus(s: Settings) -> Bus:
    return Bus(s, dispatcher=CeleryDispatcher(make_app(s)))


def close_bus(b: Bus) -> None:
    if b._store is not None:
        b._store.r.close()
    dispatcher = getattr(b.dispatcher, "fallback", b.dispatcher)  # under a ListDispatcher
    if isinstance(dispatcher, CeleryDispatcher):
        dispatcher.app.close()


# -- measuring -----------------------------------------------------------------------------


@dataclass
class Row:
    """One scenario's figures."""

    name: str
    messages: int
    floor_lines: int | None = None  # lines the harness finds on the floor
    notices: int | None = None  # notice lines on the floor
    rendered: int | None = None  # "[inbox" headers the model sees after one drain
    turns: int = 0  # turns the messages caused
    send_s: float = 0.0  # first send to the last send's return
    written_s: float | None = None  # first send to all on the floor
    to_wake_s: float | None = None
    header: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def send_rate(self) -> float:
        return self.messages / self.send_s if self.send_s > 0 else 0.0

    @property
    def throughput(self) -> float | None:
        if not self.written_s:
            return None
        return self.messages / self.written_s

    def summary(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if v is not None and k != "extra"}
        out.update(self.extra)
        out["send_per_s"] = round(self.send_rate, 1)
        if self.throughput is not None:
            out["per_s"] = round(self.throughput, 1)
        for k in ("send_s", "written_s", "to_wake_s"):
            if out.get(k) is not None:
                out[k] = round(out[k], 3)
        return out


@dataclass
class Burst:
    """When a burst started (both clocks) and when its last send returned."""

    t0: float
    t0_ms: int
    t1: float


def burst(n: int, k: int, contexts: list[Any], send_one: Callable[[Any, int], object]) -> Burst:
    """K sender threads, sender i sending messages i, i+K, ...; started together."""
    gate = threading.Barrier(k + 1)
    stop = threading.Event()
    errors: list[BaseException] = []

    def work(i: int) -> None:
        ctx = contexts[i]
        try:
            gate.wait()
            for idx in range(i, n, k):
                if stop.is_set():
                    return
                send_one(ctx, idx)
        except threading.BrokenBarrierError:
            return
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(k)]
    for t in threads:
        t.start()
    try:
        t0_ms = now_ms()
        t0 = time.perf_counter()
        gate.wait()
        for t in threads:
            while t.is_alive():
                t.join(0.2)
        t1 = time.perf_counter()
    finally:
        # On Ctrl-C the senders stop too, before their connections are closed.
        stop.set()
        gate.abort()
        for t in threads:
            t.join(5)
    if errors:
        raise BenchError(f"a sender failed: {errors[0]!r}") from errors[0]
    return Burst(t0, t0_ms, t1)


def median_row(rows: list[Row]) -> Row:
    """The median round by its headline figure; every round's figure is kept beside it."""

    def key(r: Row) -> float:
        return r.throughput if r.throughput is not None else r.send_rate

    ordered = sorted(rows, key=key)
    mid = ordered[(len(ordered) - 1) // 2]
    mid.extra["per_s_rounds"] = [round(key(r), 1) for r in rows]
    mid.extra["turns_rounds"] = [r.turns for r in rows]
    return mid


def wait_until(
    predicate: Callable[[], object], timeout: float, what: str, interval: float = POLL_S
) -> float:
    """Poll until truthy; the perf_counter time it first was."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return time.perf_counter()
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def events(b: Bus, sid: str, kind: str) -> list[dict[str, str]]:
    return [f for _e, f in b.store.r.xrange(b.store.k.s(sid, "events")) if f["kind"] == kind]


def all_written(b: Bus, sid: str) -> bool:
    """Every message taken from the stream and carried by a notice that was written."""
    k = b.store.k
    if b.store.queue.backlog(sid):
        return False
    return not any(b.store.r.exists(k.s(sid, name)) for name in ("new", "notice"))


def fields_for(idx: int, k: int, to: str, cls: str) -> dict[str, Any]:
    return {"from": f"bench:lane{idx % k}", "to_id": to, "text": f"msg {idx}", "class": cls}


def bus_contexts(s: Settings, k: int, warm_sid: str) -> list[Bus]:
    """One Bus (own Redis and broker connections) per sender, warmed by one real send."""
    out = []
    for i in range(k):
        b = celery_bus(s)
        b.send(fields_for(i, k, warm_sid, "action"))
        out.append(b)
    return out


def floor_after_drain(b: Bus, sid: str, row: Row) -> None:
    lines = b.floor.peek(sid)
    row.floor_lines = len(lines)
    row.notices = sum(1 for ln in lines if ln.get("kind") == "notice")
    text = b.drain(sid, stamped=True)
    assert isinstance(text, str)
    row.rendered = text.count("[inbox")
    row.header = text.splitlines()[0] if text else ""


def scenario_running(s: Settings, observer: Bus, n: int, k: int, tag: str) -> Row:
    sid = f"coord{tag}"
    observer.open_session(sid)
    observer.turn(sid, "start")
    turns_before = observer.session(sid).turns
    senders = bus_contexts(s, k, sid)
    # The warm-up sends go out as the first notice; take them off before measuring.
    wait_until(lambda: all_written(observer, sid), 30, "the warm-up sends")
    observer.drain(sid)
    try:
        b = burst(
            n,
            k,
            senders,
            lambda bus, idx: bus.send(fields_for(idx, k, sid, "blocker" if idx == 3 else "action")),
        )
        t_written = wait_until(lambda: all_written(observer, sid), 60, f"all {n} written")
    finally:
        for x in senders:
            close_bus(x)
    row = Row("A bus, running session", n, send_s=b.t1 - b.t0, written_s=t_written - b.t0)
    floor_after_drain(observer, sid, row)
    wakes = len(events(observer, sid, "wake"))
    row.turns = wakes + (observer.session(sid).turns - turns_before)
    return row


def scenario_idle(s: Settings, observer: Bus, n: int, k: int, tag: str) -> Row:
    sid = f"idle{tag}"
    warm = f"warmidle{tag}"
    observer.open_session(sid)
    observer.turn(sid, "start")  # it had one turn, and is idle now
    observer.turn(sid, "end")
    turns_before = observer.session(sid).turns
    observer.open_session(warm)  # running: the warm-up sends steer, never wake
    observer.turn(warm, "start")
    senders = bus_contexts(s, k, warm)
    wait_until(lambda: all_written(observer, warm), 30, "the warm-up sends")
    try:
        with scheduler_thread(s):
            b = burst(
                n,
                k,
                senders,
                lambda bus, idx: bus.send(fields_for(idx, k, sid, "blocker")),
            )
            t_wake = wait_until(lambda: events(observer, sid, "wake"), 30, "the wake")
            t_written = wait_until(lambda: all_written(observer, sid), 60, f"all {n} written")
            # Long enough for a second (wrong) wake to show: one debounce and a margin.
            time.sleep(DEBOUNCE_S + 0.5)
    finally:
        for x in senders:
            close_bus(x)
    wake_records = events(observer, sid, "wake")
    row = Row("B bus, idle session", n, send_s=b.t1 - b.t0, written_s=t_written - b.t0)
    row.to_wake_s = (int(wake_records[0]["at"]) - b.t0_ms) / 1000 if wake_records else None
    row.extra["to_wake_seen_s"] = round(t_wake - b.t0, 3)
    row.extra["debounce_s"] = DEBOUNCE_S
    floor_after_drain(observer, sid, row)
    row.turns = len(wake_records) + (observer.session(sid).turns - turns_before)
    return row


def scenario_naive(s: Settings, observer: Bus, n: int, k: int, tag: str) -> Row:
    sid = f"naive{tag}"
    warm = f"warmnaive{tag}"
    queue = host_queue(s.host)
    apps = []
    for i in range(k):
        app = make_app(s)
        app.send_task(
            "bench.naive_deliver",
            kwargs={
                "sid": warm,
                "msg": parse_message(fields_for(i, k, warm, "action")).wire(),
            },
            queue=queue,
            ignore_result=True,
        )
        apps.append(app)
    wait_until(lambda: len(observer.floor.peek(warm)) >= k, 30, "the naive warm-up")

    def send_one(app: Any, idx: int) -> None:
        msg = parse_message(fields_for(idx, k, sid, "blocker" if idx == 3 else "action"))
        app.send_task(
            "bench.naive_deliver",
            kwargs={"sid": sid, "msg": msg.wire()},
            queue=queue,
            ignore_result=True,
        )

    def lines_path() -> Path:
        return observer.floor.session_dir(sid) / "messages.jsonl"

    def count_lines() -> int:
        try:
            with lines_path().open("rb") as fh:
                return sum(1 for _ in fh)
        except FileNotFoundError:
            return 0

    try:
        b = burst(n, k, apps, send_one)
        t_written = wait_until(lambda: count_lines() >= n, 120, f"{n} naive lines", 0.01)
    finally:
        for app in apps:
            app.close()
    row = Row("naive, task per message", n, send_s=b.t1 - b.t0, written_s=t_written - b.t0)
    lines = observer.floor.peek(sid)
    row.floor_lines = len(lines)
    row.notices = 0
    row.turns = len(lines)  # each line is a turn of its own in a harness
    return row


def scenario_raw(s: Settings, n: int, k: int, tag: str) -> Row:
    stream = f"{s.key_prefix}:{{raw}}:stream{tag}"
    lines = [parse_message(fields_for(i, k, "raw", "action")) for i in range(n)]
    wire = [(m.id, m.line()) for m in lines]
    clients = []
    for _ in range(k):
        c = redis.Redis.from_url(s.redis_url or DEFAULT_URL, decode_responses=True)
        c.xadd(f"{s.key_prefix}:{{raw}}:warm", {"id": "warm", "m": "{}"})
        clients.append(c)

    def send_one(c: redis.Redis, idx: int) -> None:
        mid, line = wire[idx]
        c.xadd(stream, {"id": mid, "m": line})

    try:
        b = burst(n, k, clients, send_one)
    finally:
        for c in clients:
            c.close()
    return Row("raw XADD per message", n, send_s=b.t1 - b.t0)


# -- report --------------------------------------------------------------------------------


def fmt(value: float | int | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def turns_cell(row: Row) -> str:
    if row.floor_lines is None:
        return "-"
    rounds = row.extra.get("turns_rounds") or [row.turns]
    if len(set(rounds)) == 1:
        return str(row.turns)
    return f"{row.turns} (rounds: {', '.join(map(str, rounds))})"


def report(console: Console, rows: dict[str, Row], meta: dict[str, Any]) -> dict[str, Any]:
    table = Table(
        title=f"burst: {meta['messages']} messages from {meta['senders']} senders"
        f" (median of {meta['rounds']} rounds)"
    )
    for col, just in [
        ("scenario", "left"),
        ("messages", "right"),
        ("floor lines", "right"),
        ("notices (rendered)", "right"),
        ("turns caused", "right"),
        ("to wake s", "right"),
        ("send s", "right"),
        ("send /s", "right"),
        ("written s", "right"),
        ("msgs/s", "right"),
    ]:
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for row in rows.values():
        notices = "-" if row.notices is None else f"{row.notices} ({fmt(row.rendered, 'd')})"
        table.add_row(
            row.name,
            str(row.messages),
            fmt(row.floor_lines, "d"),
            notices,
            turns_cell(row),
            fmt(row.to_wake_s),
            fmt(row.send_s),
            fmt(row.send_rate, ".0f"),
            fmt(row.written_s),
            fmt(row.throughput, ".0f"),
        )
    console.print(table)

    a, b, naive, raw = rows["running"], rows["idle"], rows["naive"], rows["raw"]
    ratios = {
        "throughput_bus_over_naive": ratio(a.throughput, naive.throughput),
        "throughput_idle_bus_over_naive": ratio(b.throughput, naive.throughput),
        "turns_naive_over_bus_idle": ratio(naive.turns, max(b.turns, 1)),
        "send_rate_bus_over_raw_xadd": ratio(a.send_rate, raw.send_rate),
        "send_rate_naive_over_raw_xadd": ratio(naive.send_rate, raw.send_rate),
    }
    rt = Table(title="ratios (same run)")
    rt.add_column("ratio")
    rt.add_column("value", justify="right")
    rt.add_column("meaning")
    rt.add_row(
        "bus / naive throughput",
        fmt(ratios["throughput_bus_over_naive"]) + "x",
        "A's messages per second, first send to all on the floor, over naive's",
    )
    rt.add_row(
        "bus idle / naive throughput",
        fmt(ratios["throughput_idle_bus_over_naive"]) + "x",
        "the same for B (includes the debounce)",
    )
    rt.add_row(
        "turns naive / turns bus",
        fmt(ratios["turns_naive_over_bus_idle"], ".0f") + "x",
        f"naive {naive.turns} turns vs B {b.turns}; A (mid-turn) caused {a.turns}",
    )
    rt.add_row(
        "bus send / raw XADD rate",
        fmt(ratios["send_rate_bus_over_raw_xadd"]) + "x",
        "Bus.send per second over one bare XADD per second (the store floor)",
    )
    rt.add_row(
        "naive send / raw XADD rate",
        fmt(ratios["send_rate_naive_over_raw_xadd"]) + "x",
        "Celery send_task per second over one bare XADD per second",
    )
    console.print(rt)
    return {
        **meta,
        "scenarios": {k: r.summary() for k, r in rows.items()},
        "ratios": {k: None if v is None else round(v, 3) for k, v in ratios.items()},
    }


# -- main ----------------------------------------------------------------------------------


def sigterm_exits(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def bench_settings(home: Path, url: str, prefix: str, *, own_server: bool = False) -> Settings:
    """The benches' bus: this host, a fresh key prefix, the bench's debounce, and the flood
    bounds off (they would cap a sender at 50/s and refuse a batch over the 500 burst:
    measure the bus itself; bench/README says what the bucket costs)."""
    return Settings(
        home=home,
        host=BENCH_HOST,
        redis_url=url,
        broker_url=broker_for(url),
        key_prefix=prefix,
        wake_debounce_s=DEBOUNCE_S,
        send_rate=0.0,
        max_unread=0,
        # The kick list (bus.delivery.kick_list), as a deployment runs by default (Settings.kick);
        # INBOX_KICK=celery measures a delivery kicked by a Celery task instead.
        kick="celery" if os.environ.get("INBOX_KICK", "").strip().lower() == "celery" else "list",
        # The benches count what was stored by the sessions' events: kept for the run.
        events_keep_s=3600.0,
        # A Redis the bench did not start is shared (other benches, other users' figures,
        # whatever its URL spells): the scheduler leaves its settings alone; a server of
        # the bench's own (``own_server``) gets them.
        memory_settings=own_server,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--messages", "-n", type=int, default=300, help="messages per scenario")
    parser.add_argument("--senders", "-k", type=int, default=7, help="concurrent senders")
    parser.add_argument("--redis-url", default=None, help="default: see the module docstring")
    parser.add_argument(
        "--repeat", "-r", type=int, default=3, help="rounds; each figure is the median round"
    )
    args = parser.parse_args(argv)
    if min(args.messages, args.senders, args.repeat) < 1:
        parser.error("--messages, --senders and --repeat must be at least 1")
    signal.signal(signal.SIGTERM, sigterm_exits)
    # Ctrl-C stops the run and cleans up, even when started with SIGINT ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # Wide enough for the table when the output goes to a file or a pipe.
    console = Console(width=None if sys.stdout.isatty() else 140)
    started = time.perf_counter()
    prefix = f"bench{uuid.uuid4().hex[:10]}"
    tmp = Path(tempfile.mkdtemp(prefix="inbox-bench-"))
    url = ""
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, tmp, ignore_errors=True)
        try:
            url, found = pick_redis(args.redis_url, tmp, stack)
            # Registered after the server's stop, so it runs before it.
            stack.callback(cleanup_keys, console, url, prefix)
            home = tmp / "home"
            home.mkdir()
            s = bench_settings(home, url, prefix, own_server=found == STARTED)
            console.print(f"redis {url} ({found}), prefix {prefix}; starting the worker...")
            worker = start_worker(s)
            stack.callback(worker.stop)
            observer = celery_bus(s)
            stack.callback(close_bus, observer)
            n, k = args.messages, args.senders
            runs: dict[str, list[Row]] = {key: [] for key in ("running", "idle", "naive", "raw")}
            for r in range(1, args.repeat + 1):
                # Interleaved rounds, so a drift in the machine's load hits every scenario.
                tag = str(r)
                console.print(f"round {r}/{args.repeat}: raw XADD, A, naive, B...")
                runs["raw"].append(scenario_raw(s, n, k, tag))
                runs["running"].append(scenario_running(s, observer, n, k, tag))
                runs["naive"].append(scenario_naive(s, observer, n, k, tag))
                runs["idle"].append(scenario_idle(s, observer, n, k, tag))
            rows = {key: median_row(rs) for key, rs in runs.items()}
            meta = {
                "bench": "burst",
                "messages": n,
                "senders": k,
                "rounds": args.repeat,
                "cores": os.cpu_count(),
                "redis": found,
                "worker": "prefork -c 2",
            }
            summary = report(console, rows, meta)
            summary["total_s"] = round(time.perf_counter() - started, 1)
            print(json.dumps(summary, separators=(",", ":")))
            return 0
        except KeyboardInterrupt:
            console.print("[yellow]interrupted; cleaning up[/yellow]")
            return 130
        except BenchError as exc:
            console.print(f"[red]bench failed:[/red] {exc}")
            return 1


def cleanup_keys(console: Console, url: str, prefix: str) -> None:
    try:
        delete_prefix(url, prefix)
    except (redis.RedisError, OSError) as exc:
        console.print(f"[yellow]could not delete keys {prefix}:*: {exc}[/yellow]")


if __name__ == "__main__":
    sys.exit(main())
