"""The bus as it runs with Celery: a Bus whose dispatcher is a real Celery app, the
scheduler's loop in a thread, and reads of what a session's stream and marks say."""

from __future__ import annotations

import json
import threading

from bus.api import Bus
from bus.core.settings import Settings
from bus.delivery.scheduler import run as run_scheduler
from workers.app import make_app
from workers.dispatch import CeleryDispatcher


def celery_bus(s: Settings) -> Bus:
    return Bus(s, dispatcher=CeleryDispatcher(make_app(s)))


class Scheduler:
    """``inbox scheduler``'s loop in a thread; stop() is a scheduler going away."""

    def __init__(self, s: Settings) -> None:
        self.bus = celery_bus(s)
        self.stop_event = threading.Event()
        self.thread = threading.Thread(
            target=run_scheduler,
            args=(self.bus.delivery, self.stop_event),
            kwargs={"max_sleep_s": 0.05},
            daemon=True,
        )
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(5)


def events(b: Bus, sid: str, kind: str) -> list[dict[str, str]]:
    return [f for _e, f in b.store.r.xrange(b.store.k.s(sid, "events")) if f["kind"] == kind]


def marks(b: Bus, sid: str) -> dict[str, str]:
    raw = b.store.r.hgetall(b.store.k.s(sid, "msgs"))
    return {k: json.loads(v)["mark"] for k, v in raw.items()}
