"""Counters and the delivery-latency histogram, shared by every process through Redis.

Workers, the scheduler and the gateway run in different processes (and on different
hosts), so counts live in two Redis hashes (:attr:`bus.store.keys.Keys.metrics`,
:attr:`bus.store.keys.Keys.latency`) rather than in process memory; :class:`RedisCollector`
reads them back for Prometheus.

Counter names the bus calls :meth:`Metrics.incr` with (exported as
``inbox_<name>_total``):

| name | labels | counted when |
|---|---|---|
| ``messages_in`` | - | a send stored a new message |
| ``notices`` | - | a notice was written for a session |
| ``wakes`` | - | a session was woken |
| ``deliveries`` | ``via="socket"`` or ``via="file"`` | a line reached the host |
| ``flushes`` | - | queued fyi messages were flushed into a notice |
| ``retries`` | - | a delivery was retried |

:meth:`Metrics.observe_latency` records send-to-delivery seconds.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.utils import floatToGoString

from bus.core.status_view import HOST_DOWN_S
from bus.store.redis_errors import StoreError

from . import liveness
from .counter_flush import HeldCounters

if TYPE_CHECKING:
    from bus.store.store import Store

BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, math.inf,
)  # fmt: skip
SESSION_STATES = ("idle", "running", "closing", "closed")

_NAME_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_FIELD_RE = re.compile(r"^([a-zA-Z_][a-zA-Z0-9_]*)(?:\{(.*)\})?$")
_LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def bucket_field(bound: float) -> str:
    """The hash field of one bucket: ``le=0.005`` … ``le=+Inf``."""
    return f"le={floatToGoString(bound)}"


def counter_field(name: str, labels: dict[str, str]) -> str:
    """``name`` or ``name{a="x",b="y"}`` with labels sorted, so equal label sets share a field."""
    if not _NAME_RE.match(name):
        raise ValueError(f"bad metric name {name!r}")
    for label in labels:
        if not _NAME_RE.match(label):
            raise ValueError(f"bad label name {label!r}")
    if not labels:
        return name
    inner = ",".join(f'{k}="{_escape(str(labels[k]))}"' for k in sorted(labels))
    return f"{name}{{{inner}}}"


def parse_field(field: str) -> tuple[str, dict[str, str]] | None:
    """The inverse of :func:`counter_field`; None for a field it did not write."""
    m = _FIELD_RE.match(field)
    if not m:
        return None
    labels = {k: _unescape(v) for k, v in _LABEL_RE.findall(m.group(2) or "")}
    return m.group(1), labels


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def summed(writes: list[tuple[str, str, float]]) -> list[tuple[str, str, float]]:
    """The same additions, one per hash field, in first-seen order (a batch of many
    deliveries counts each counter once: HINCRBY by the sum, not once per delivery)."""
    out: dict[tuple[str, str], float] = {}
    for name, field, n in writes:
        key = (name, field)
        out[key] = out[key] + n if key in out else n
    return [(name, field, n) for (name, field), n in out.items()]


class Metrics:
    """Writes and reads the shared counters of one bus (one key prefix)."""

    def __init__(self, store: Store, *, flush_s: float = 0.0) -> None:
        """``flush_s`` > 0: additions are held in this process and written that often
        (:class:`~bus.telemetry.counter_flush.HeldCounters`); 0: each batch at once."""
        # Every Redis command goes through the store (bus.store.metrics).
        self.store = store
        self._local = threading.local()  # this thread's writes held by batched()
        self.held = HeldCounters(store.server.counter_add_many, flush_s) if flush_s > 0 else None

    @contextmanager
    def batched(self) -> Iterator[None]:
        """Hold this thread's counter writes and send them in one round trip at the end
        (a worker's delivery wrote 3-5 counters, each its own round trip)."""
        if getattr(self._local, "held", None) is not None:  # nested: the outer one sends
            yield
            return
        held: list[tuple[str, str, float]] = []
        self._local.held = held
        try:
            yield
        finally:
            self._local.held = None
            if held and self.held is not None:
                self.held.add(held)
            elif held:
                # MULTI where it can be (a cluster refuses one over two keys' slots).
                self.store.server.counter_add_many(summed(held))

    def _write(self, writes: list[tuple[str, str, float]]) -> bool:
        """Queue ``writes`` when batched(); False when the caller must send them now."""
        held = getattr(self._local, "held", None)
        if held is not None:
            held.extend(writes)
            return True
        if self.held is not None:
            self.held.add(writes)
            return True
        return False

    def incr(self, name: str, n: int = 1, **labels: str) -> None:
        """Add ``n`` to counter ``name`` (with ``labels``)."""
        field = counter_field(name, labels)
        if not self._write([("metrics", field, int(n))]):
            self.store.server.counter_incr(field, n)

    def observe_latency(self, seconds: float) -> None:
        """Record one delivery latency: its bucket, the sum and the count, atomically."""
        seconds = max(0.0, float(seconds))
        # Only the first bucket that fits is counted; the collector makes them cumulative,
        # so an observation costs three writes rather than fourteen.
        bound = next(b for b in BUCKETS if seconds <= b)
        writes = [
            ("latency", bucket_field(bound), 1),
            ("latency", "sum", seconds),
            ("latency", "count", 1),
        ]
        if self._write(writes):
            return
        self.store.server.counter_add_many(writes, atomic=True)

    def snapshot(self) -> dict[str, Any]:
        """``{"counters": {field: n}, "latency": {"buckets": {le: cumulative}, "sum", "count"}}``."""
        counters_raw, latency_raw = self.store.server.counters_read()
        counters = {_text(k): int(_text(v)) for k, v in counters_raw.items()}
        latency = {_text(k): _text(v) for k, v in latency_raw.items()}
        buckets: dict[str, int] = {}
        total = 0
        for bound in BUCKETS:
            total += int(latency.get(bucket_field(bound), 0))
            buckets[floatToGoString(bound)] = total
        return {
            "counters": counters,
            "latency": {
                "buckets": buckets,
                "sum": float(latency.get("sum", 0.0)),
                "count": int(latency.get("count", 0)),
            },
        }


class RedisCollector:
    """A Prometheus collector reading the bus's shared counters, queues and sessions."""

    def __init__(self, store: Callable[[], Store], down_s: float = HOST_DOWN_S) -> None:
        self._store = store  # a provider: registering must not connect
        self.down_s = down_s  # INBOX_HOST_DOWN_S: a host without a beat this long is down

    def describe(self) -> list[Metric]:
        # Registering must not touch Redis (the gateway starts while Redis may be down).
        return []

    def collect(self) -> Iterator[Metric]:
        """Yield every counter, the latency histogram, queue depths and session states."""
        up = GaugeMetricFamily("inbox_redis_up", "1 when the bus store answered this scrape")
        try:
            families = list(self._collect())
        except StoreError:
            # A scrape while Redis is down still answers, saying so.
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from families

    def _collect(self) -> Iterator[Metric]:
        store = self._store()
        snap = Metrics(store).snapshot()
        yield from _counter_families(snap["counters"])

        lat = snap["latency"]
        hist = HistogramMetricFamily(
            "inbox_delivery_latency_seconds", "Seconds from send to delivery on the host"
        )
        hist.add_metric([], list(lat["buckets"].items()), sum_value=lat["sum"])
        yield hist

        depth: dict[str, int] = {}
        states = dict.fromkeys(SESSION_STATES, 0)
        for info in store.sessions.sessions():
            depth[info.host] = depth.get(info.host, 0) + store.queue.backlog(info.session)
            states[info.state] = states.get(info.state, 0) + 1
        queue = GaugeMetricFamily(
            "inbox_queue_depth", "Messages stored and not yet taken by a delivery", labels=["host"]
        )
        for host in sorted(depth):
            queue.add_metric([host], depth[host])
        yield queue
        sessions = GaugeMetricFamily("inbox_sessions", "Registered sessions", labels=["state"])
        for state in sorted(states):
            sessions.add_metric([state], states[state])
        yield sessions
        rows = liveness.workers(store, self.down_s)
        yield from _worker_families(rows)
        yield from _problem_families(store, rows)


def _worker_families(rows: list[dict[str, Any]]) -> Iterator[Metric]:
    """Each heartbeat's age and each host's broker queue depth (bus/telemetry/liveness.py)."""
    beat = GaugeMetricFamily(
        "inbox_worker_beat_age_seconds", "Seconds since the heartbeat", labels=["name"]
    )
    progress = GaugeMetricFamily(
        "inbox_worker_progress_age_seconds", "Seconds since a task finished", labels=["name"]
    )
    queued = GaugeMetricFamily(
        "inbox_worker_queue", "Deliveries waiting in the host's broker queue", labels=["host"]
    )
    for row in rows:
        if "beat_age_s" in row:
            beat.add_metric([row["name"]], row["beat_age_s"])
        if "progress_age_s" in row:
            progress.add_metric([row["name"]], row["progress_age_s"])
        if "queue" in row:
            queued.add_metric([row["name"]], row["queue"])
    yield from (beat, progress, queued)


def _problem_families(store: Store, rows: list[dict[str, Any]]) -> Iterator[Metric]:
    """``inbox doctor``'s figures (bus.telemetry.problems): each host up (1) or down (0),
    and how many problems of each check the bus has now."""
    from bus.core.models import now_ms
    from bus.core.status_view import is_scheduler
    from bus.telemetry.problems import counts, operator_problems

    up = GaugeMetricFamily(
        "inbox_host_up", "1 while the host's worker beats, 0 once it is down", labels=["host"]
    )
    for row in rows:
        if not is_scheduler(row["name"]):
            up.add_metric([row["name"]], 1 if row.get("state") == "up" else 0)
    yield up
    sessions = [s.model_dump() for s in store.sessions.sessions()]
    sids = [s["session"] for s in sessions]
    oldest, wakes = store.queue.oldest_waiting(sids), store.queue.oldest_wake_notices(sids)
    found = counts(operator_problems(rows, sessions, oldest, now_ms(), wake_notices=wakes))
    problems = GaugeMetricFamily(
        "inbox_problems", "What `inbox doctor` finds now, by check", labels=["check"]
    )
    for check, n in sorted(found.items()):
        problems.add_metric([check], n)
    yield problems


def _counter_families(counters: dict[str, int]) -> Iterator[Metric]:
    # Group fields by name: one family per counter, one sample per label set.
    grouped: dict[str, list[tuple[dict[str, str], int]]] = {}
    for field, value in counters.items():
        parsed = parse_field(field)
        if parsed is None:
            continue
        name, labels = parsed
        grouped.setdefault(name, []).append((labels, value))
    for name in sorted(grouped):
        rows = grouped[name]
        label_names = sorted({k for labels, _ in rows for k in labels})
        fam = CounterMetricFamily(f"inbox_{name}", f"inbox {name} (shared)", labels=label_names)
        for labels, value in rows:
            fam.add_metric([labels.get(k, "") for k in label_names], value)
        yield fam


__all__ = ["BUCKETS", "Metrics", "RedisCollector", "bucket_field", "counter_field", "parse_field"]
