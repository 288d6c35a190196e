"""Celery tasks: ``send`` (exactly that name), ``inbox.deliver`` and ``inbox.tick``."""

from __future__ import annotations

import logging
from typing import Any

from celery import Task

from bus import BusError, connect
from bus.api import Bus
from bus.scheduler import tick as run_tick

from .app import app
from .dispatch import CeleryDispatcher

log = logging.getLogger(__name__)
_bus: Bus | None = None


def get_bus() -> Bus:
    """One Bus per worker process, built from the environment on first use."""
    global _bus
    if _bus is None:
        _bus = connect(dispatcher=CeleryDispatcher())
    return _bus


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
    return get_bus().deliver_session(sid).to_json()


@app.task(name="inbox.tick")
def tick() -> dict[str, Any]:
    """Take due wakes, flushes and retries (atomically) and dispatch their deliveries."""
    return run_tick(get_bus())
