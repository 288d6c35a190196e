"""The kick loops' work as Celery task events, so Flower shows it (docs/decisions/delivery-path.md).

A delivery kicked through the host's kick list is not a Celery task, so Celery itself
says nothing of it. :class:`FlowerReporter` turns what each delivery batch did
(:func:`bus.delivery.report.works_of`) into the events a task would have sent:
``task-received``, ``task-started`` and ``task-succeeded`` (or ``task-failed``), under
the worker's own node name, as ``inbox.deliver``, ``inbox.wake`` or ``inbox.flush``.
Flower's Tasks page, its per-worker counters and its task API read them as they read
any task's.

The delivery loop only appends to a bounded buffer; a thread of the process publishes
what gathered every :data:`FLUSH_S` as ONE message (Celery's ``task-multi`` batch, which
every event receiver unpacks), so the events cost a lone delivery no round trip, and
traffic of many deliveries a second one ``PUBLISH`` per process per flush. While the
broker does not answer, events wait in the buffer (the oldest dropped past
:data:`MAX_EVENTS`, counted in the log).
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from typing import Any

from celery import Celery

from bus.delivery.report import Work

log = logging.getLogger(__name__)

# Seconds between publishes: a delivery shows in Flower within about this long. Each
# publish is a round trip and a kombu message; at sparse traffic it carries a few
# deliveries, so its share of a delivery's CPU halves with every doubling of this.
FLUSH_S = 1.0
# Events kept while the broker is away (3 a batch); the oldest go first past it.
MAX_EVENTS = 30_000
# Sessions named in a task's kwargs; the rest counted.
NAMED_SESSIONS = 20

TASK_NAMES = {"deliver": "inbox.deliver", "wake": "inbox.wake", "flush": "inbox.flush"}
FAILED_NAME = "inbox.deliver"


def sessions_repr(sessions: list[str] | tuple[str, ...]) -> str:
    """The kwargs an operator reads: the sessions served (the first few, then a count)."""
    named = list(sessions[:NAMED_SESSIONS])
    more = len(sessions) - len(named)
    return json.dumps({"sessions": named + ([f"+{more} more"] if more else [])})


def task_events(
    name: str, sessions: list[str] | tuple[str, ...], started: float
) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    """The received and started events of one task (its id with them)."""
    task_id = str(uuid.uuid4())
    received = {
        "uuid": task_id,
        "name": name,
        "args": "()",
        "kwargs": sessions_repr(sessions),
        "root_id": task_id,
        "parent_id": None,
        "retries": 0,
        "eta": None,
        "expires": None,
        "timestamp": started,
    }
    return task_id, [
        ("task-received", received),
        ("task-started", {"uuid": task_id, "timestamp": started}),
    ]


def _failed(task_id: str, at: float, error: str) -> tuple[str, dict[str, Any]]:
    return (
        "task-failed",
        {"uuid": task_id, "exception": error, "traceback": error, "timestamp": at},
    )


class FlowerReporter:
    """A :class:`bus.delivery.report.WorkReporter` that sends Celery task events."""

    def __init__(self, app: Celery, hostname: str, *, flush_s: float = FLUSH_S) -> None:
        self.app = app
        self.hostname = hostname
        self.flush_s = flush_s
        self._events: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()
        self._dropped = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._dispatcher: Any = None
        self._conn: Any = None

    # --- the delivery loop's side: record only -------------------------------------------

    def done(self, works: list[Work], started: float, runtime: float) -> None:
        events: list[tuple[str, dict[str, Any]]] = []
        for work in works:
            task_id, begun = task_events(TASK_NAMES[work.kind], work.sessions, started)
            events += begun
            if work.errors:
                events.append(_failed(task_id, started + runtime, "; ".join(work.errors)))
                continue
            events.append(
                (
                    "task-succeeded",
                    {
                        "uuid": task_id,
                        "result": json.dumps(work.result()),
                        "runtime": runtime,
                        "timestamp": started + runtime,
                    },
                )
            )
        self._add(events)

    def failed(self, sessions: list[str], started: float, runtime: float, error: str) -> None:
        task_id, events = task_events(FAILED_NAME, sessions, started)
        events.append(_failed(task_id, started + runtime, error))
        self._add(events)

    def _add(self, events: list[tuple[str, dict[str, Any]]]) -> None:
        with self._lock:
            self._events.extend(events)
            over = len(self._events) - MAX_EVENTS
            if over > 0:
                del self._events[:over]
                self._dropped += over

    # --- the publishing thread --------------------------------------------------------------

    def start(self) -> FlowerReporter:
        self._thread = threading.Thread(target=self._run, name="flower-events", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 2.0) -> None:
        """Publish what is left, then stop."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.wait(self.flush_s):
            self.flush()
        self.flush()
        if self._conn is not None:
            self._conn.release()

    def flush(self) -> int:
        """Publish the events gathered so far as one message; how many went."""
        with self._lock:
            events, self._events = self._events, []
            dropped, self._dropped = self._dropped, 0
        if dropped:
            log.warning("%d delivery events dropped while the broker was away", dropped)
        if not events:
            return 0
        try:
            dispatcher = self._open()
            for kind, fields in events:
                dispatcher.send(kind, **fields)
            dispatcher.flush()
        except Exception as exc:  # the broker away: keep them for the next flush
            log.info("delivery events not published (%s); kept for the next try", exc)
            self._reset()
            with self._lock:
                self._events[:0] = events
            return 0
        return len(events)

    def _open(self) -> Any:
        if self._dispatcher is None:
            self._conn = self.app.connection_for_write()
            self._dispatcher = self.app.events.Dispatcher(
                self._conn,
                hostname=self.hostname,
                enabled=True,
                # A failed publish raises (the events go back on this buffer, bounded),
                # not into the dispatcher's own unbounded one.
                buffer_while_offline=False,
                # Every task event of a flush in one message (``task-multi``).
                buffer_group=["task"],
                buffer_limit=MAX_EVENTS + 1,
            )
        return self._dispatcher

    def _reset(self) -> None:
        dispatcher, conn = self._dispatcher, self._conn
        self._dispatcher = self._conn = None
        for part in (dispatcher, conn):
            if part is None:
                continue
            try:
                part.close() if part is dispatcher else part.release()
            except Exception as exc:  # a dead connection's close may fail too
                log.debug("closing the events connection: %s", exc)
