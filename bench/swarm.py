"""Swarm benchmark: many sessions, many messages, the bus against its baselines.

    python bench/swarm.py [--size 50|500|tiny] [--workers 1,2,4] [--redis-url URL]

Every figure is measured in this run, on one Redis and real Celery workers, and the
headline figures are ratios against baselines measured the same way:

- **raw**: redis-py pipelined XADD of the same wire JSON into the sessions' streams
  (the floor of Python + Redis here);
- **naive**: one Celery task per message appending its line to the session's JSONL
  (``bench/naive.py``), 2 prefork children;
- **ingest**: this project's batched ingest, ``Bus.send_many`` (what ``inbox send --jsonl``
  and ``POST /v1/send/batch`` call), sessions whose host has no worker;
- **end to end**: running sessions, each with a listener on its socket that acks; from
  the first send until every message is in a notice a listener received, for 1, 2 and 4
  worker processes;
- **latency**: send → notice on a listening socket, one message at a time at 100/s, and
  the naive task's send → line for comparison;
- **wake lateness**: idle sessions each get a blocker at once; how late each debounced
  wake fires (wake record time − arrival − debounce);
- **the user's paths**: ``inbox send --jsonl`` and ``POST /v1/send/batch`` of 50,000
  messages as a user runs them (a process of their own, ``bench/userpath.py``), ingest
  beside raw XADD of as many, and end to end (``--user-messages``);
- **memory**: 1,000 sessions registered, one message each delivered and noticed: bytes
  per session from ``INFO memory`` (server-wide, so noisy on a shared Redis) and from
  ``MEMORY USAGE`` summed over this run's keys, and keys per session (``by_kind``: the
  same per key kind).

Without ``Bus.send_many`` (an older tree) ingest and end to end send one message at a
time, as ``send --jsonl`` did then, so the same harness gives the before figures.
Setup and teardown as ``bench/burst.py`` (fresh key prefix deleted at the end, workers
stopped, temp dirs removed, also on Ctrl-C). A JSON line with every figure ends the output.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import redis  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from bench.burst import (  # noqa: E402
    STARTED,
    BenchError,
    bench_settings,
    celery_bus,
    cleanup_keys,
    close_bus,
    pick_redis,
    scheduler_thread,
    sigterm_exits,
    start_worker,
    wait_until,
)
from bus.api import Bus  # noqa: E402
from bus.core.models import parse_message  # noqa: E402
from bus.core.settings import Settings  # noqa: E402
from bus.surfaces.harness.listener import Listener  # noqa: E402
from workers.app import host_queue, make_app  # noqa: E402

BENCH_HOST = "bench"
SINK_HOST = "sink"  # sessions whose host runs no worker: ingest alone is measured
DEBOUNCE_S = 0.5
CHUNK = 1000  # messages per send_many call / per XADD pipeline
SIZES: dict[str, dict[str, int]] = {
    # sessions, messages, senders, latency messages, memory sessions
    "tiny": {"sessions": 3, "messages": 60, "senders": 3, "latency": 10, "memory": 20},
    "50": {"sessions": 50, "messages": 5000, "senders": 13, "latency": 200, "memory": 1000},
    "500": {"sessions": 500, "messages": 50000, "senders": 13, "latency": 200, "memory": 1000},
}


def pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def percentiles(values: list[float]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for name, p in (("p50", 50), ("p90", 90), ("p99", 99), ("max", 100)):
        v = pct(values, p)
        out[name] = None if v is None else round(v, 2)
    out["n"] = len(values)
    return out


def wire(idx: int, k: int, to: str, tag: str, cls: str = "action") -> dict[str, Any]:
    return {
        "id": f"{tag}-{idx}",
        "from": f"bench:lane{idx % k}",
        "to_id": to,
        "text": f"msg {idx}",
        "class": cls,
    }


def batched(bus: Bus) -> bool:
    return hasattr(bus, "send_many")


def send_all(bus: Bus, items: list[dict[str, Any]]) -> None:
    """The project's ingest: send_many in chunks, else one send per message (older trees)."""
    if batched(bus):
        for i in range(0, len(items), CHUNK):
            bus.send_many(items[i : i + CHUNK])
    else:
        for item in items:
            bus.send(item)


def run_senders(k: int, work: Callable[[int], None]) -> float:
    """K threads started together; seconds from the start until the last returns."""
    gate = threading.Barrier(k + 1)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            gate.wait()
            work(i)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(k)]
    for t in threads:
        t.start()
    t0 = time.perf_counter()
    gate.wait()
    for t in threads:
        t.join()
    if errors:
        raise BenchError(f"a sender failed: {errors[0]!r}") from errors[0]
    return time.perf_counter() - t0


# -- scenarios -----------------------------------------------------------------------------


def scenario_raw(s: Settings, n: int, sessions: int, k: int) -> dict[str, Any]:
    lines = [parse_message(wire(i, k, f"raw{i % sessions}", "raw")).line() for i in range(n)]
    clients = [redis.Redis.from_url(s.store_url(), decode_responses=True) for _ in range(k)]
    for c in clients:
        c.ping()

    def work(j: int) -> None:
        pipe = clients[j].pipeline(transaction=False)
        for count, i in enumerate(range(j, n, k), 1):
            pipe.xadd(
                f"{s.key_prefix}:{{raw{i % sessions}}}:stream", {"id": f"raw-{i}", "m": lines[i]}
            )
            if count % CHUNK == 0:
                pipe.execute()
        pipe.execute()

    try:
        secs = run_senders(k, work)
    finally:
        for c in clients:
            c.close()
    return {"messages": n, "s": round(secs, 3), "per_s": round(n / secs, 1)}


def scenario_ingest(s: Settings, observer: Bus, n: int, sessions: int, k: int) -> dict[str, Any]:
    sids = [f"ing{i}" for i in range(sessions)]
    for sid in sids:
        observer.open_session(sid, host=SINK_HOST)
        observer.turn(sid, "start")
    senders = [celery_bus(s) for _ in range(k)]
    for b in senders:
        b.store.ping()
    items = [wire(i, k, sids[i % sessions], "ing") for i in range(n)]
    try:
        secs = run_senders(k, lambda j: send_all(senders[j], items[j::k]))
    finally:
        for b in senders:
            close_bus(b)
    stored = sum(int(observer.store.r.xlen(observer.store.k.s(sid, "stream"))) for sid in sids)
    if stored != n:
        raise BenchError(f"ingest stored {stored} of {n} messages")
    return {
        "messages": n,
        "s": round(secs, 3),
        "per_s": round(n / secs, 1),
        "how": "send_many" if batched(observer) else "send per message",
    }


def scenario_naive(s: Settings, observer: Bus, n: int, sessions: int, k: int) -> dict[str, Any]:
    sids = [f"naive{i}" for i in range(sessions)]
    queue = host_queue(s.host)
    apps = [make_app(s) for _ in range(k)]
    for i, app in enumerate(apps):  # warm: connections open, worker children warm
        app.send_task(
            "bench.naive_deliver",
            kwargs={"sid": "naivewarm", "msg": parse_message(wire(i, k, "naivewarm", "nw")).wire()},
            queue=queue,
            ignore_result=True,
        )
    wait_until(lambda: len(observer.floor.peek("naivewarm")) >= k, 60, "the naive warm-up")
    msgs = [parse_message(wire(i, k, sids[i % sessions], "naive")).wire() for i in range(n)]

    def work(j: int) -> None:
        for i in range(j, n, k):
            apps[j].send_task(
                "bench.naive_deliver",
                kwargs={"sid": msgs[i]["to_id"], "msg": msgs[i]},
                queue=queue,
                ignore_result=True,
            )

    def lines() -> int:
        total = 0
        for sid in sids:
            try:
                with (observer.floor.session_dir(sid) / "messages.jsonl").open("rb") as fh:
                    total += sum(1 for _ in fh)
            except FileNotFoundError:
                pass
        return total

    try:
        t0 = time.perf_counter()
        send_s = run_senders(k, work)
        t_end = wait_until(lambda: lines() >= n, 600, f"{n} naive lines", 0.05)
    finally:
        for app in apps:
            app.close()
    secs = t_end - t0
    return {
        "messages": n,
        "send_s": round(send_s, 3),
        "s": round(secs, 3),
        "per_s": round(n / secs, 1),
        "turns": n,
    }


class Ears:
    """A listener on each session's socket that acks and records the notices it gets."""

    def __init__(self, b: Bus, sids: list[str]) -> None:
        self.lock = threading.Lock()
        self.covered: set[str] = set()
        self.notices: dict[str, int] = dict.fromkeys(sids, 0)
        self.seen_at: dict[str, float] = {}
        self.want = 0
        self.done = threading.Event()
        self.listeners = [Listener.for_session(b.floor, sid, self._on(sid)).start() for sid in sids]

    def _on(self, sid: str) -> Callable[[dict[str, Any]], bool]:
        def on_line(obj: dict[str, Any]) -> bool:
            now = time.perf_counter()
            notice = obj.get("notice") if obj.get("kind") == "notice" else None
            ids = notice.get("messages", []) if isinstance(notice, dict) else [obj.get("id")]
            with self.lock:
                self.notices[sid] += 1
                for mid in ids or []:
                    if mid not in self.seen_at:
                        self.seen_at[str(mid)] = now
                    self.covered.add(str(mid))
                if self.want and len(self.covered) >= self.want:
                    self.done.set()
            return True

        return on_line

    def reset(self, want: int) -> None:
        with self.lock:
            self.covered.clear()
            self.seen_at.clear()
            self.notices = dict.fromkeys(self.notices, 0)
            self.want = want
            self.done.clear()

    def stop(self) -> None:
        for listener in self.listeners:
            listener.stop()


def open_running(b: Bus, sids: list[str], host: str = BENCH_HOST) -> None:
    for sid in sids:
        b.open_session(sid, host=host)
        b.turn(sid, "start")


def scenario_e2e(
    s: Settings, observer: Bus, n: int, sessions: int, k: int, workers: int, tag: str
) -> dict[str, Any]:
    sids = [f"e2e{tag}x{i}" for i in range(sessions)]
    open_running(observer, sids)
    ears = Ears(observer, sids)
    senders = [celery_bus(s) for _ in range(k)]
    try:
        # Warm: one message per session through the same path, each noticed.
        ears.reset(sessions)
        send_all(senders[0], [wire(i, k, sid, f"warm{tag}") for i, sid in enumerate(sids)])
        if not ears.done.wait(120):
            raise BenchError(f"the warm-up notices did not all arrive ({len(ears.covered)})")
        turns_before = sum(observer.session(sid).turns for sid in sids)
        items = [wire(i, k, sids[i % sessions], f"e2e{tag}") for i in range(n)]
        ears.reset(n)
        t0 = time.perf_counter()
        send_s = run_senders(k, lambda j: send_all(senders[j], items[j::k]))
        if not ears.done.wait(900):
            raise BenchError(f"only {len(ears.covered)} of {n} messages were noticed")
        secs = time.perf_counter() - t0
        notices = sum(ears.notices.values())
        wakes = sum(
            1
            for sid in sids
            for _e, f in observer.store.r.xrange(observer.store.k.s(sid, "events"))
            if f["kind"] == "wake"
        )
        turns = wakes + sum(observer.session(sid).turns for sid in sids) - turns_before
    finally:
        ears.stop()
        for b in senders:
            close_bus(b)
    return {
        "workers": workers,
        "messages": n,
        "sessions": sessions,
        "send_s": round(send_s, 3),
        "s": round(secs, 3),
        "per_s": round(n / secs, 1),
        "notices": notices,
        "notices_per_session": round(notices / sessions, 1),
        "turns": turns,
    }


def scenario_latency(s: Settings, observer: Bus, count: int, rate: float) -> dict[str, Any]:
    """Send → notice (bus) and send → line (naive task), one message at a time."""
    sid_bus, sid_naive = "latbus", "latnaive"
    open_running(observer, [sid_bus])
    ears = Ears(observer, [sid_bus, sid_naive])
    sender = celery_bus(s)
    app = make_app(s)
    queue = host_queue(s.host)
    out: dict[str, Any] = {"rate_per_s": rate, "messages": count, "kick": s.kick}
    try:
        for name, send in (
            ("bus", lambda m: sender.send(m)),
            (
                "naive",
                lambda m: app.send_task(
                    "bench.naive_deliver",
                    kwargs={"sid": sid_naive, "msg": parse_message(m).wire()},
                    queue=queue,
                    ignore_result=True,
                ),
            ),
        ):
            to = sid_bus if name == "bus" else sid_naive
            for w in range(3):  # warm
                ears.reset(1)
                send(wire(w, 1, to, f"lw{name}"))
                ears.done.wait(10)
            ears.reset(count)
            sent_at: dict[str, float] = {}
            t_next = time.perf_counter()
            for i in range(count):
                m = wire(i, 1, to, f"lat{name}")
                t_next += 1 / rate
                sent_at[m["id"]] = time.perf_counter()
                send(m)
                time.sleep(max(0.0, t_next - time.perf_counter()))
            if not ears.done.wait(60):
                raise BenchError(f"latency ({name}): {len(ears.covered)} of {count} arrived")
            with ears.lock:
                lat = [(ears.seen_at[mid] - t) * 1000 for mid, t in sent_at.items()]
            out[name] = percentiles(lat)
    finally:
        ears.stop()
        close_bus(sender)
        app.close()
    return out


def scenario_wake(s: Settings, observer: Bus, sessions: int) -> dict[str, Any]:
    """Idle sessions each take one blocker at once: lateness of each debounced wake."""
    sids = [f"wake{i}" for i in range(sessions)]
    for sid in sids:
        observer.open_session(sid, host=BENCH_HOST)
        observer.turn(sid, "start")
        observer.turn(sid, "end")
    k = observer.store.k

    woke: dict[str, int] = {}
    read_to: dict[str, str] = {}  # each session's last event read: a poll reads what is new
    # The workers' count of wakes (bus.telemetry.metrics, one hash field): while it says some are
    # still to come, a poll is one HGET, not a read of every session's events (500 event
    # streams a poll was a fifth of the 2 cores' CPU during the burst it measures).
    wakes_before = _wakes_counted(observer)

    def counted() -> bool:
        return _wakes_counted(observer) - wakes_before >= len(sids)

    def all_woke() -> bool:
        # The sessions not seen woken yet, their new events read in one pipeline per poll
        # (one round trip, not one per session, and only the entries since the last poll:
        # the poll shares the 2 cores with the workers and the scheduler).
        left = [sid for sid in sids if sid not in woke]
        pipe = observer.store.r.pipeline(transaction=False)
        for sid in left:
            pipe.xrange(k.s(sid, "events"), min=f"({read_to[sid]}" if sid in read_to else "-")
        for sid, rows in zip(left, pipe.execute(), strict=True):
            if rows:
                read_to[sid] = str(rows[-1][0])
            at = next((int(f["at"]) for _e, f in rows if f["kind"] == "wake"), None)
            if at is not None:
                woke[sid] = at
        return len(woke) == len(sids)

    with scheduler_thread(s):
        send_all(observer, [wire(i, 1, sid, "wk", "blocker") for i, sid in enumerate(sids)])
        # Lateness is read from each wake's own event time, not from when the poll sees
        # it: so no poll before anything can be due, then a slow one (a poll of every
        # session costs CPU on the cores the wakes themselves run on).
        time.sleep(DEBOUNCE_S)
        with contextlib.suppress(BenchError):  # counters off or short: the events decide
            wait_until(counted, 120, "every wake counted", 0.05)
        wait_until(all_woke, 120, "every wake", 0.25)
    late = []
    for sid in sids:
        # When its one message was stored: the id of the record the append script wrote
        # beside the queue entry (the queue and its cursor go once delivered).
        eid = next(
            (
                e
                for e, f in observer.store.r.xrange(k.s(sid, "events"))
                if f["kind"] == "inbox_received"
            ),
            None,
        ) or observer.store.queue.cursor(sid)
        arrived = int(str(eid).split("-")[0])
        late.append(woke[sid] - arrived - DEBOUNCE_S * 1000)
    return {"sessions": sessions, "debounce_ms": DEBOUNCE_S * 1000, "late_ms": percentiles(late)}


def _wakes_counted(observer: Bus) -> int:
    """The ``wakes`` counter (bus.telemetry.metrics) as stored now."""
    got = observer.store.r.hget(observer.store.k.metrics, "wakes")
    return int(got or 0)


def key_kind(name: bytes | str, prefix: str) -> str:
    """A key's kind: its name with the hash tag's contents folded (``{sid}:stream`` ->
    ``sid:stream``, ``{thr_..}:log`` -> ``thr:log``, ``{rc:<day>:<b>}:rcpt`` -> ``rc:rcpt``)."""
    text = name.decode() if isinstance(name, bytes) else name
    rest = text[len(prefix) + 1 :]
    m = re.fullmatch(r"\{([^}]*)\}:(.*)", rest)
    if not m:
        return rest
    tag, tail = m.groups()
    kind = "thr" if tag.startswith("thr_") else tag.split(":", 1)[0] if ":" in tag else "sid"
    tail = re.sub(r"^(ans|rc):.*", r"\1:<id>", tail)
    return f"{kind}:{tail}"


def prefix_kinds(r: Any, prefix: str) -> dict[str, list[int]]:
    """kind -> [keys, bytes by MEMORY USAGE] under the run's prefix (immune to other users
    of Redis)."""
    names = list(r.scan_iter(match=f"{prefix}:*", count=1000))
    pipe = r.pipeline(transaction=False)
    for name in names:
        pipe.memory_usage(name, samples=0)
    kinds: dict[str, list[int]] = {}
    for name, size in zip(names, pipe.execute(), strict=True):
        row = kinds.setdefault(key_kind(name, prefix), [0, 0])
        row[0] += 1
        row[1] += int(size or 0)
    return kinds


def node_max_bytes(r: Any) -> int | None:
    try:
        return int(r.config_get("stream-node-max-bytes")["stream-node-max-bytes"])
    except (redis.RedisError, KeyError, ValueError):
        return None  # CONFIG may be disabled (a managed Redis)


IDLE_ANSWER = "ok"


def idle_pass(
    observer: Bus, sids: list[str], compact_sessions: Callable[[], object] | None
) -> bool | None:
    """End every session's turn (the Stop hook's ``turn end``), wait until no delivery is
    in flight, then run the compaction pass again; ``None`` without a pass to run."""
    if compact_sessions is None:
        return None
    r = observer.store.r
    k = observer.store.k
    prefix = observer.settings.key_prefix

    def queued() -> dict[str, int]:
        # Celery's queues and unacked tasks, the kick lists: their lengths.
        out = {}
        for pattern in (f"{prefix}:*celery*", f"{prefix}:*kick*:list"):
            for name in r.scan_iter(match=pattern, count=1000):
                kind = r.type(name)
                if kind in ("list", "hash"):
                    out[name] = r.llen(name) if kind == "list" else r.hlen(name)
        return out

    baseline = queued()
    for sid in sids:
        observer.turn(sid, "end", answer=IDLE_ANSWER)

    def settled() -> bool:
        # The turn's end kicks a delivery (nothing to deliver): its task or kick queued,
        # unacked or running (its lock) would count as the session's; what other rows
        # left queued is not waited for.
        if any(n > baseline.get(name, 0) for name, n in queued().items()):
            return False
        return not any(r.exists(k.s(sid, "lock"), k.s(sid, "pending")) for sid in sids)

    wait_until(settled, 120, "no delivery queued or in flight after the turns ended", 0.1)
    compact_sessions()
    return True


def scenario_memory(s: Settings, observer: Bus, sessions: int) -> dict[str, Any]:
    """Sessions registered, one message each delivered and noticed (drained).

    Counts every key the sessions brought, their threads' and message ids' included."""
    r = observer.store.r
    sids = [f"mem{i}" for i in range(sessions)]

    def used() -> int:
        return int(r.info("memory")["used_memory"])

    def clients() -> int:
        # Connection buffers (the bench's and workers' pools, a pipeline's query buffer
        # not yet shrunk) are in INFO's used_memory but no session's.
        return sum(int(c.get("tot-mem", 0)) for c in r.client_list())

    kinds_before = prefix_kinds(r, s.key_prefix)
    keys_before = sum(k for k, _ in kinds_before.values())
    usage_before = sum(b for _, b in kinds_before.values())
    before, clients_before = used(), clients()
    open_running(observer, sids)
    send_all(observer, [wire(i, 1, sid, "mem") for i, sid in enumerate(sids)])

    def written() -> bool:
        return all(observer.floor.peek(sid) for sid in sids)

    wait_until(written, 300, "every message's notice on the floor", 0.1)
    wait_until(
        lambda: not any(r.exists(observer.store.k.s(sid, "notice")) for sid in sids),
        60,
        "no notice in flight",
        0.05,
    )
    for sid in sids:
        observer.drain(sid)
    after = used()
    kinds_after = prefix_kinds(r, s.key_prefix)
    keys_after = sum(k for k, _ in kinds_after.values())
    usage_after = sum(b for _, b in kinds_after.values())
    # Per key kind, per session: keys and MEMORY USAGE bytes the run added.
    by_kind = {}
    for kind, (n, size) in sorted(kinds_after.items()):
        n0, size0 = kinds_before.get(kind, [0, 0])
        if n != n0 or size != size0:
            by_kind[kind] = [round((n - n0) / sessions, 2), round((size - size0) / sessions)]
    # Then the scheduler's compaction pass (bus.store.compaction, once a minute), on these
    # sessions' streams only: what a quiet session settles at (its events dropped as
    # once quiet for QUIET_MS; here at once).
    store = observer.store
    compact_sessions: Callable[[], object] | None = None
    try:
        from bus.store import compaction

        compaction.compact_sessions(store, sids, 0)
        compact_sessions = lambda: compaction.compact_sessions(store, sids, 0)  # noqa: E731
        compacted, clients_compacted = used(), clients()
        kinds_compacted = prefix_kinds(r, s.key_prefix)
    except (ImportError, redis.ResponseError):  # an older tree, or a server refusing it
        compacted, kinds_compacted, clients_compacted = after, kinds_after, clients()
    # Then each session's turn ends, as its harness's Stop hook ends it (SPEC: the session
    # is then ``idle``; its ``carried`` set is answered and goes), with a short answer
    # (IDLE_ANSWER: the answer is kept in each carried message's send answer, so a longer
    # one costs its length), and the compaction pass again (the turn's records go).
    idle = idle_pass(observer, sids, compact_sessions)
    if idle is None:
        idle_info, kinds_idle, clients_idle = compacted, kinds_compacted, clients_compacted
    else:
        idle_info, kinds_idle, clients_idle = used(), prefix_kinds(r, s.key_prefix), clients()
    return {
        "sessions": sessions,
        "idle_info_bytes_per_session": round((idle_info - before) / sessions),
        "idle_info_less_clients_per_session": round(
            (idle_info - before - (clients_idle - clients_before)) / sessions
        ),
        "idle_usage_bytes_per_session": round(
            (sum(b for _, b in kinds_idle.values()) - usage_before) / sessions
        ),
        "idle_keys_per_session": round(
            (sum(n for n, _ in kinds_idle.values()) - keys_before) / sessions, 1
        ),
        "idle_by_kind": {
            kind: round((size - kinds_before.get(kind, [0, 0])[1]) / sessions)
            for kind, (_n, size) in sorted(kinds_idle.items())
            if size != kinds_before.get(kind, [0, 0])[1]
        },
        "compacted_info_bytes_per_session": round((compacted - before) / sessions),
        "compacted_info_less_clients_per_session": round(
            (compacted - before - (clients_compacted - clients_before)) / sessions
        ),
        "compacted_usage_bytes_per_session": round(
            (sum(b for _, b in kinds_compacted.values()) - usage_before) / sessions
        ),
        "compacted_by_kind": {
            kind: round((size - kinds_before.get(kind, [0, 0])[1]) / sessions)
            for kind, (_n, size) in sorted(kinds_compacted.items())
            if kind in by_kind
        },
        "info_bytes_per_session": round((after - before) / sessions),
        "usage_bytes_per_session": round((usage_after - usage_before) / sessions),
        "keys_per_session": round((keys_after - keys_before) / sessions, 1),
        "stream_node_max_bytes": node_max_bytes(r),
        "by_kind": by_kind,
    }


# -- main ----------------------------------------------------------------------------------


@contextmanager
def worker(s: Settings, concurrency: int) -> Iterator[None]:
    w = start_worker(s, concurrency)
    try:
        yield
    finally:
        w.stop()


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else round(a / b, 3)


def scenario_user_ingest(
    s: Settings, observer: Bus, n: int, sessions: int, k: int, tmp: Path
) -> dict[str, Any]:
    """``inbox send --jsonl`` and ``POST /v1/send/batch`` of ``n`` messages (ingest
    alone: sessions whose host has no worker), beside raw XADD of as many, in this run."""
    from bench import userpath

    sids = [f"usr{i}" for i in range(sessions)]
    for sid in sids:
        observer.open_session(sid, host=SINK_HOST)
        observer.turn(sid, "start")
    out: dict[str, Any] = {"raw": scenario_raw(s, n, sessions, k)}
    for how in ("cli", "http"):
        items = [wire(i, k, sids[i % sessions], f"usr{how}") for i in range(n)]
        out[how] = userpath.ingest(s, observer, how, items, tmp)
    return out


def scenario_user_e2e(
    s: Settings, observer: Bus, n: int, sessions: int, k: int, tmp: Path
) -> dict[str, Any]:
    """End to end through ``inbox send --jsonl`` and ``POST /v1/send/batch``: running
    sessions of the bench host, a listener on each; until every message is noticed."""
    from bench import userpath

    sids = [f"ue2e{i}" for i in range(sessions)]
    open_running(observer, sids)
    ears = Ears(observer, sids)
    out: dict[str, Any] = {}
    try:
        ears.reset(sessions)  # warm: one message per session, each noticed
        userpath.cli_send(s, [wire(i, k, sid, "uwarm") for i, sid in enumerate(sids)], tmp)
        if not ears.done.wait(120):
            raise BenchError("the user path's warm-up notices did not all arrive")
        for how in ("cli", "http"):
            items = [wire(i, k, sids[i % sessions], f"ue2e{how}") for i in range(n)]
            ears.reset(n)
            row = userpath.e2e(s, how, items, tmp, ears.done.wait)
            row["notices_per_session"] = round(sum(ears.notices.values()) / sessions, 1)
            out[how] = row
    finally:
        ears.stop()
    return out


def report(console: Console, out: dict[str, Any]) -> None:
    t = Table(title=f"swarm: {out['messages']} messages to {out['sessions']} sessions")
    for col in ("", "messages/s", "vs naive", "vs raw XADD", "notes"):
        t.add_column(col, justify="left" if not col or col == "notes" else "right")
    raw, naive, ing = out["raw"]["per_s"], out["naive"]["per_s"], out["ingest"]["per_s"]
    t.add_row("raw redis-py pipelined XADD", f"{raw:.0f}", "", "1.00x", "the floor")
    t.add_row(
        f"naive: Celery task per message, {out['naive']['workers']} children",
        f"{naive:.0f}",
        "1.00x",
        "",
        "one turn per message",
    )
    t.add_row(
        f"this project, ingest ({out['ingest']['how']})",
        f"{ing:.0f}",
        f"{ing / naive:.2f}x",
        f"{ing / raw:.2f}x",
        "",
    )
    for row in out["e2e"]:
        t.add_row(
            f"end to end, {row['workers']} worker process(es)",
            f"{row['per_s']:.0f}",
            f"{row['per_s'] / naive:.2f}x",
            f"{row['per_s'] / raw:.2f}x",
            f"{row['notices_per_session']} notices/session, {row['turns']} turns",
        )
    user = out.get("user")
    if user:
        ur = user["ingest"]["raw"]["per_s"]
        t.add_row(
            f"raw pipelined XADD, {user['ingest']['raw']['messages']} messages",
            f"{ur:.0f}",
            "",
            "1.00x",
            "beside the user's paths",
        )
        for how, name in (("cli", "inbox send --jsonl"), ("http", "POST /v1/send/batch")):
            row = user["ingest"][how]
            t.add_row(
                f"ingest, {name}",
                f"{row['per_s']:.0f}",
                f"{row['per_s'] / naive:.2f}x",
                f"{row['per_s'] / ur:.2f}x",
                f"{row['messages']} messages, one process",
            )
        for how, name in (("cli", "inbox send --jsonl"), ("http", "POST /v1/send/batch")):
            row = user.get("e2e", {}).get(how)
            if row:
                t.add_row(
                    f"end to end, {name}",
                    f"{row['per_s']:.0f}",
                    f"{row['per_s'] / naive:.2f}x",
                    f"{row['per_s'] / ur:.2f}x",
                    f"{row['notices_per_session']} notices/session",
                )
    console.print(t)
    lt = Table(title="latency and lateness (ms)")
    for col in ("", "p50", "p90", "p99", "max", "n"):
        lt.add_column(col, justify="left" if not col else "right")
    kick = out["latency"].get("kick", "?")
    for name, key in (
        (f"send → notice, bus ({kick} kick)", "bus"),
        ("send → line, naive", "naive"),
    ):
        p = out["latency"][key]
        lt.add_row(name, *(str(p[x]) for x in ("p50", "p90", "p99", "max", "n")))
    w = out["wake"]["late_ms"]
    lt.add_row(
        f"wake lateness, {out['wake']['sessions']} sessions",
        *(str(w[x]) for x in ("p50", "p90", "p99", "max", "n")),
    )
    console.print(lt)
    m = out["memory"]
    console.print(
        f"memory per session (running, noticed) over {m['sessions']} sessions: INFO memory "
        f"{m['info_bytes_per_session']} B, MEMORY USAGE {m['usage_bytes_per_session']} B, "
        f"{m['keys_per_session']} keys; after the compaction pass: INFO memory "
        f"{m['compacted_info_bytes_per_session']} B, MEMORY USAGE "
        f"{m['compacted_usage_bytes_per_session']} B"
    )
    if "idle_usage_bytes_per_session" in m:
        console.print(
            f"  after each turn ended and the pass again (idle): INFO memory "
            f"{m['idle_info_bytes_per_session']} B ({m['idle_info_less_clients_per_session']} B"
            f" less the connections' buffers), MEMORY USAGE "
            f"{m['idle_usage_bytes_per_session']} B, {m['idle_keys_per_session']} keys"
        )
    console.print("ratios: " + json.dumps(out["ratios"]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="50", help="sessions")
    parser.add_argument("--workers", default=None, help="worker processes, e.g. 1,2,4")
    parser.add_argument("--redis-url", default=None, help="default: as bench/burst.py")
    parser.add_argument(
        "--skip", default="", help="comma list: memory,wake,latency,naive,raw,ingest,e2e,user"
    )
    parser.add_argument(
        "--user-messages",
        type=int,
        default=None,
        help="messages through inbox send --jsonl and POST /v1/send/batch (default 50,000)",
    )
    args = parser.parse_args(argv)
    size = SIZES[args.size]
    workers = [
        int(w) for w in (args.workers or ("1" if args.size == "tiny" else "1,2,4")).split(",")
    ]
    skip = set(filter(None, args.skip.split(",")))
    signal.signal(signal.SIGTERM, sigterm_exits)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    console = Console(width=None if sys.stdout.isatty() else 140)
    started = time.perf_counter()
    prefix = f"bench{uuid.uuid4().hex[:10]}"
    tmp = Path(tempfile.mkdtemp(prefix="inbox-swarm-"))
    n, sessions, k = size["messages"], size["sessions"], size["senders"]
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, tmp, ignore_errors=True)
        try:
            url, found = pick_redis(args.redis_url, tmp, stack)
            stack.callback(cleanup_keys, console, url, prefix)
            home = tmp / "home"
            home.mkdir()
            s = bench_settings(home, url, prefix, own_server=found == STARTED)
            observer = celery_bus(s)
            stack.callback(close_bus, observer)
            console.print(
                f"redis {url} ({found}), prefix {prefix}, {n} messages, {sessions} sessions"
            )
            out: dict[str, Any] = {
                "bench": "swarm",
                "size": args.size,
                "messages": n,
                "sessions": sessions,
                "senders": k,
                "cores": os.cpu_count(),
                "redis": found,
                "batched": batched(observer),
            }
            if "raw" not in skip:
                console.print("raw pipelined XADD...")
                out["raw"] = scenario_raw(s, n, sessions, k)
            if "ingest" not in skip:
                console.print("ingest...")
                out["ingest"] = scenario_ingest(s, observer, n, sessions, k)
            un = args.user_messages or (600 if args.size == "tiny" else 50_000)
            if "user" not in skip:
                console.print(f"the user's paths, {un} messages: ingest...")
                out["user"] = {"ingest": scenario_user_ingest(s, observer, un, sessions, k, tmp)}
            out["e2e"] = []
            for c in workers:
                with worker(s, c):
                    if c == 2 or len(workers) == 1:
                        if "naive" not in skip:
                            console.print("naive, 2 children..." if c == 2 else "naive...")
                            out["naive"] = scenario_naive(s, observer, n, sessions, k)
                            out["naive"]["workers"] = c
                        if "latency" not in skip:
                            console.print("latency...")
                            out["latency"] = scenario_latency(s, observer, size["latency"], 100.0)
                        if "wake" not in skip:
                            console.print("wake lateness...")
                            out["wake"] = scenario_wake(s, observer, sessions)
                        if "memory" not in skip:
                            console.print("memory...")
                            out["memory"] = scenario_memory(s, observer, size["memory"])
                        if "user" not in skip:
                            console.print(f"the user's paths, {un} messages: end to end...")
                            out["user"]["e2e"] = scenario_user_e2e(
                                s, observer, un, sessions, k, tmp
                            )
                            out["user"]["e2e"]["workers"] = c
                    if "e2e" not in skip:
                        console.print(f"end to end, {c} worker process(es)...")
                        out["e2e"].append(scenario_e2e(s, observer, n, sessions, k, c, str(c)))
            by_w = {row["workers"]: row["per_s"] for row in out["e2e"]}
            e2e_main = by_w.get(2, out["e2e"][0]["per_s"] if out["e2e"] else None)
            naive = out.get("naive", {}).get("per_s")
            raw = out.get("raw", {}).get("per_s")
            ingest = out.get("ingest", {}).get("per_s")
            out["ratios"] = {
                "ingest_over_raw_xadd": ratio(ingest, raw),
                "ingest_over_naive": ratio(ingest, naive),
                "e2e_over_naive": ratio(e2e_main, naive),
                "e2e_over_raw_xadd": ratio(e2e_main, raw),
                **{f"e2e_{w}w_over_1w": ratio(v, by_w.get(1)) for w, v in by_w.items() if w != 1},
            }
            if "latency" in out:
                out["ratios"]["latency_p99_bus_over_naive"] = ratio(
                    out["latency"]["bus"]["p99"], out["latency"]["naive"]["p99"]
                )
            if "user" in out:
                u = out["user"]
                ur = u["ingest"]["raw"]["per_s"]
                for how in ("cli", "http"):
                    out["ratios"][f"user_{how}_ingest_over_raw_xadd"] = ratio(
                        u["ingest"][how]["per_s"], ur
                    )
                    if how in u.get("e2e", {}):
                        out["ratios"][f"user_{how}_e2e_over_naive"] = ratio(
                            u["e2e"][how]["per_s"], naive
                        )
            out["total_s"] = round(time.perf_counter() - started, 1)
            if not skip:
                report(console, out)
            print(json.dumps(out, separators=(",", ":")))
            return 0
        except KeyboardInterrupt:
            console.print("[yellow]interrupted; cleaning up[/yellow]")
            return 130
        except BenchError as exc:
            console.print(f"[red]bench failed:[/red] {exc}")
            return 1


if __name__ == "__main__":
    sys.exit(main())
