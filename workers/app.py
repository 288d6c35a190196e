"""The Celery app, configured from the bus settings.

Queues: ``inbox`` is shared (the ``send`` task and scheduled ticks run on any worker);
``host.<H>`` is host H's own queue (deliveries to H's sessions). A worker started for H
consumes ``inbox`` and ``host.<H>`` only.
"""

from __future__ import annotations

import logging
from functools import partial, wraps
from typing import Any

from celery import Celery
from celery.worker.consumer import Consumer
from kombu.transport import redis as kombu_redis

from bus.core.settings import Settings
from bus.core.version import __version__
from bus.store.data_version import DATA_VERSION
from bus.telemetry.liveness import SHARED_QUEUE, host_queue

from . import broker_faults  # noqa: F401 (the consumer waits out a refusing broker)

__all__ = ["SHARED_QUEUE", "app", "host_queue", "make_app"]


log = logging.getLogger(__name__)


def _tolerate_a_closed_connection(step: Any) -> Any:
    """kombu's redis QoS restores unacked messages while closing a channel whose
    connection is already gone, and acks a task that finished after it closed; both raise
    ``AttributeError`` (``'NoneType' object has no attribute 'hostname'``/``'client'``),
    which Celery calls unrecoverable: the worker stops. The messages stay in kombu's unacked
    index (redelivered after the visibility timeout, and a delivery is idempotent), and the
    bus's sweep dispatches every backlogged session within seconds, so carry on."""

    @wraps(step)
    def tolerant(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return step(self, *args, **kwargs)
        except AttributeError as exc:
            log.warning("%s skipped: the broker connection is gone (%s)", step.__name__, exc)
            return None

    return tolerant


for _name in ("restore_unacked", "ack"):
    _step = getattr(kombu_redis.QoS, _name)
    if not getattr(_step, "__wrapped__", None):
        setattr(kombu_redis.QoS, _name, _tolerate_a_closed_connection(_step))


class FastReconnectConsumer(Consumer):
    """Celery's consumer, reconnecting to a restarted broker within a second.

    Celery calls kombu's ``ensure_connection`` with its default waits (2 s, then 4 s, 6 s,
    ...), so a Redis restart of one second stalled a worker for 6 s or more; here the
    waits are 0.2 s growing to 1 s.
    """

    def ensure_connected(self, conn: Any) -> Any:
        conn.ensure_connection = partial(
            type(conn).ensure_connection,
            conn,
            interval_start=0.2,
            interval_step=0.4,
            interval_max=1.0,
        )
        return super().ensure_connected(conn)


# kombu's check of its long-lived connections runs this often; the worker's BRPOP (sent
# with a 1 s server-side timeout) is dropped and made again once its reply is this much
# overdue (with kombu's default, 25 s, a worker's consumer heard nothing for that long
# after a partition ended; kombu documents up to about twice it).
BROKER_CHECK_S = 2.0


def broker_link_options(settings: Settings) -> dict[str, object]:
    """kombu's redis transport options for a broker that may vanish without closing the
    connection (a partition): every call waits ``INBOX_REDIS_TIMEOUT_S`` for its answer
    (kombu's default is forever: a publish on a dead connection never returned), a
    connect ``INBOX_REDIS_CONNECT_TIMEOUT_S``, and the consumer's BRPOP is checked every
    :data:`BROKER_CHECK_S`."""
    return {
        "socket_timeout": settings.redis_timeout_s,
        "socket_connect_timeout": settings.redis_connect_timeout_s,
        "socket_keepalive": True,
        "health_check_interval": BROKER_CHECK_S,
    }


# Broker URL schemes whose server Celery's redis result backend can use as is.
REDIS_SCHEMES = ("redis", "rediss", "redis+socket", "sentinel")


def result_options(settings: Settings) -> dict[str, object]:
    """Celery's result backend: the broker's own Redis (Celery's redis backend reads
    ``redis+socket://`` as a unix socket, ``sentinel://`` with its master name), its keys
    under the bus's prefix, kept ``INBOX_SEND_RESULT_EXPIRES_S``. Only the ``send`` task
    stores a result (workers.tasks); every other task ignores its own."""
    broker = settings.celery_broker_url()
    if broker.partition("://")[0].lower() not in REDIS_SCHEMES:
        return {}  # a broker that is not Redis: no results (celery call send prints the id)
    transport: dict[str, object] = {"global_keyprefix": f"{settings.key_prefix}:celery:"}
    if settings.broker_master_name:
        transport["master_name"] = settings.broker_master_name
    return {
        "result_backend": broker,
        "result_backend_transport_options": transport,
        "result_expires": int(settings.send_result_expires_s),
        "redis_socket_timeout": settings.redis_timeout_s,
        "redis_socket_connect_timeout": settings.redis_connect_timeout_s,
    }


def make_app(settings: Settings | None = None) -> Celery:
    settings = settings or Settings.from_env()
    app = Celery("workers", broker=settings.celery_broker_url(), include=["workers.tasks"])
    transport: dict[str, object] = {
        "visibility_timeout": settings.visibility_timeout_s,
        "global_keyprefix": f"{settings.key_prefix}:celery:",
        **broker_link_options(settings),
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
        worker_consumer="workers.app:FastReconnectConsumer",
        task_serializer="json",
        accept_content=["json"],
        worker_send_task_events=True,
        task_send_sent_event=True,
        beat_schedule={
            "inbox-tick": {"task": "inbox.tick", "schedule": 0.5},
        },
        **result_options(settings),
        # Flower's worker page lists these under Config (celery inspect conf): the release
        # and the data version the host's worker runs.
        inbox_version=__version__,
        inbox_data_version=DATA_VERSION,
    )
    return app


app = make_app()
