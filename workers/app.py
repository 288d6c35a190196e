"""The Celery app, configured from the bus settings.

Queues: ``inbox`` is shared (the ``send`` task and scheduled ticks run on any worker);
``host.<H>`` is host H's own queue (deliveries to H's sessions). A worker started for H
consumes ``inbox`` and ``host.<H>`` only.
"""

from __future__ import annotations

from celery import Celery

from bus.settings import Settings

SHARED_QUEUE = "inbox"


def host_queue(host: str) -> str:
    return f"host.{host}"


def make_app(settings: Settings | None = None) -> Celery:
    settings = settings or Settings.from_env()
    app = Celery("workers", broker=settings.celery_broker_url(), include=["workers.tasks"])
    transport: dict[str, object] = {
        "visibility_timeout": settings.visibility_timeout_s,
        "global_keyprefix": f"{settings.key_prefix}:celery:",
    }
    if settings.broker_master_name:  # a sentinel:// broker URL names its master here
        transport["master_name"] = settings.broker_master_name
    app.conf.update(
        task_default_queue=SHARED_QUEUE,
        task_routes={"send": {"queue": SHARED_QUEUE}, "inbox.tick": {"queue": SHARED_QUEUE}},
        # A delivery is acknowledged only after it ran; a killed worker's delivery is
        # redone (Celery acks a killed child's task unless told to reject it).
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_ignore_result=True,
        broker_connection_retry_on_startup=True,
        broker_transport_options=transport,
        worker_hijack_root_logger=False,
        task_serializer="json",
        accept_content=["json"],
        worker_send_task_events=True,
        task_send_sent_event=True,
        beat_schedule={
            "inbox-tick": {"task": "inbox.tick", "schedule": 0.5},
        },
    )
    return app


app = make_app()
