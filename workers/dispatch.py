"""The Celery dispatcher the bus uses by default (``INBOX_DISPATCHER``)."""

from __future__ import annotations

from celery import Celery

from .app import host_queue

# Sessions per inbox.deliver_many task: small enough that a burst of due wakes spreads over
# the host's worker processes, large enough that a task's overhead is shared (a task
# delivers its sessions as one batch, bus.delivery.engine: a few round trips for the lot).
MANY_CHUNK = 32


class CeleryDispatcher:
    """Sends ``inbox.deliver`` to the receiving host's own queue."""

    def __init__(self, celery_app: Celery | None = None) -> None:
        if celery_app is None:
            from .app import app as default_app

            celery_app = default_app
        self.app: Celery = celery_app

    def request(self, host: str, sid: str) -> None:
        # ignore_result: the app has a result backend (for ``send``), and a task sent by
        # name with a result would have this process subscribe for it.
        self.app.send_task(
            "inbox.deliver", kwargs={"sid": sid}, queue=host_queue(host), ignore_result=True
        )

    def request_many(self, host: str, sids: list[str]) -> None:
        """One ``inbox.deliver_many`` per chunk of sessions (a single session: ``inbox.deliver``).

        Chunks, not one task for all: the host's worker processes share the chunks, and
        each runs its chunk's deliveries concurrently (workers.tasks.deliver_many)."""
        if len(sids) == 1:
            self.request(host, sids[0])
            return
        queue = host_queue(host)
        for start in range(0, len(sids), MANY_CHUNK):
            chunk = sids[start : start + MANY_CHUNK]
            # Celery's saferepr of the session list (for the message headers and the sent
            # event) costs more than the rest of a send; a count says enough to an operator.
            self.app.send_task(
                "inbox.deliver_many",
                kwargs={"sids": chunk},
                queue=queue,
                argsrepr="()",
                kwargsrepr=f"{{'sids': <sessions: {len(chunk)}>}}",
                ignore_result=True,
            )
