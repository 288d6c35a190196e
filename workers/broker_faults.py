"""The worker's consumer waits out a broker that refuses writes.

Celery's broker is the bus's store. While the store refuses writes (a full disk's
``MISCONF``, a read-only replica, ``OOM``), kombu's ``BRPOP`` is answered with that error,
which Celery calls unrecoverable: the worker stopped and its supervisor restarted it in a
loop. Here the consumer says so once, waits a little before asking again, and says when
the store takes writes again; nothing is taken from the queue meanwhile, so nothing is
lost.
"""

from __future__ import annotations

import logging
import time
from functools import wraps
from queue import Empty
from typing import Any

from kombu.transport import redis as kombu_redis

from bus.core.store_faults import StoreFault, fault_of

log = logging.getLogger(__name__)

# How long the consumer waits before it asks a refusing broker again: long enough not to
# spin on the error, short enough that work resumes about as soon as the store does.
RETRY_S = 0.5


def _waiting_out_refusals(read: Any) -> Any:
    refusing: dict[str, float] = {}

    @wraps(read)
    def reading(self: Any, **options: Any) -> Any:
        try:
            got = read(self, **options)
        except self.ResponseError as exc:
            fault = _fault(exc)
            if fault is None:
                raise
            if not refusing:
                refusing["since"] = time.monotonic()
                log.warning("broker: %s; waiting (%s): %s", fault.words, fault.fix, exc)
            time.sleep(RETRY_S)
            raise Empty() from None
        except Empty:
            _back(refusing)
            raise
        _back(refusing)
        return got

    return reading


def _fault(exc: BaseException) -> StoreFault | None:
    """The write-refusing fault of a reply, also where redis-py's pipeline wraps it
    (``Command # 1 (...) of pipeline caused error: MISCONF ...``)."""
    words = str(exc)
    return fault_of(words.rsplit("caused error: ", 1)[-1])


def _back(refusing: dict[str, float]) -> None:
    since = refusing.pop("since", None)
    if since is not None:
        log.warning(
            "broker: Redis back after %.1f s (it takes writes again)", time.monotonic() - since
        )


def _quiet_while_refused(refresh: Any) -> Any:
    """kombu refreshes its binding tables every second and logs a refused refresh with a
    traceback; while the store refuses writes the consumer has said so once, and the
    refresh is simply tried again at the next cycle."""

    @wraps(refresh)
    def refreshing(self: Any) -> Any:
        try:
            return refresh(self)
        except self.ResponseError as exc:
            if _fault(exc) is None:
                raise
            return None

    return refreshing


for _name, _wrap in (
    ("_brpop_read", _waiting_out_refusals),
    ("maybe_refresh_binding_expiry", _quiet_while_refused),
):
    _step = getattr(kombu_redis.Channel, _name)
    if not getattr(_step, "__wrapped__", None):
        setattr(kombu_redis.Channel, _name, _wrap(_step))
