"""The Celery dispatcher the bus uses by default (``INBOX_DISPATCHER``)."""

from __future__ import annotations

from celery import Celery

from .app import host_queue


class CeleryDispatcher:
    """Sends ``inbox.deliver`` to the receiving host's own queue."""

    def __init__(self, celery_app: Celery | None = None) -> None:
        if celery_app is None:
            from .app import app as default_app

            celery_app = default_app
        self.app: Celery = celery_app

    def deliver(self, host: str, sid: str) -> None:
        self.app.send_task("inbox.deliver", kwargs={"sid": sid}, queue=host_queue(host))
