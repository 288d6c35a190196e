"""Celery tasks: ``send`` (exactly that name), ``inbox.deliver`` and ``inbox.tick``."""

from __future__ import annotations

import logging
from typing import Any

from celery import Task
from celery.signals import task_postrun, worker_ready, worker_shutdown

from bus import BusError, connect
from bus.api import Bus
from bus.liveness import Heartbeat
from bus.outage import OUTAGE_ERRORS, Outage
from bus.scheduler import tick as run_tick

from .app import app
from .dispatch import CeleryDispatcher

log = logging.getLogger(__name__)
_bus: Bus | None = None
_beat: Heartbeat | None = None
_outage = Outage("worker", log)


def get_bus() -> Bus:
    """One Bus per worker process, built from the environment on first use."""
    global _bus
    if _bus is None:
        _bus = connect(dispatcher=CeleryDispatcher())
    return _bus


def heartbeat() -> Heartbeat:
    """This process's heartbeat for its host (``P:beat:<host>``)."""
    global _beat
    if _beat is None:
        _beat = Heartbeat(get_bus(), get_bus().settings.host)
    return _beat


@worker_ready.connect
def _beat_while_running(**_: Any) -> None:
    heartbeat().start()


@worker_shutdown.connect
def _stop_beating(**_: Any) -> None:
    if _beat is not None:
        _beat.stop()


@task_postrun.connect
def _progress(**_: Any) -> None:
    heartbeat().progress()


@app.task(name="send")
def send(**fields: Any) -> dict[str, Any]:
    """Store and route one message given as wire fields: ``celery call send --kwargs``."""
    try:
        return get_bus().send(fields)
    except BusError as exc:
        return exc.to_json()


@app.task(name="inbox.deliver", bind=True, max_retries=None)
def deliver(self: Task, sid: str) -> dict[str, Any]:
    """Deliver what is queued for one session of this host. When another delivery holds
    the session it takes this one's work over (bus.handoff): no retry, no sleep."""
    try:
        report = get_bus().deliver_session(sid)
    except OUTAGE_ERRORS as exc:
        # Redis is restarting: one log line per outage; the scheduler's sweep redoes the
        # delivery once it is back (nothing was taken that is not still in the stream).
        _outage.failed(exc)
        return {"ok": False, "error": "unavailable", "session": sid}
    _outage.ok()
    return report.to_json()


@app.task(name="inbox.tick")
def tick() -> dict[str, Any]:
    """Take due wakes, flushes and retries (atomically) and dispatch their deliveries."""
    return run_tick(get_bus())
