"""How the library asks a host's worker to deliver, without importing Celery.

The bus calls ``dispatcher.deliver(host, sid)`` after storing a message. The default
dispatcher is looked up by name (``INBOX_DISPATCHER``, default
``workers.dispatch:CeleryDispatcher``), so ``bus`` never imports Celery itself; when
that cannot be imported the scheduler's sweep still finds the backlog.
"""

from __future__ import annotations

import importlib
import logging
import os
from typing import Protocol

log = logging.getLogger(__name__)


class Dispatcher(Protocol):
    def deliver(self, host: str, sid: str) -> None:
        """Ask ``host``'s worker to run the delivery for session ``sid``."""


class NullDispatcher:
    """Dispatches nothing: the scheduler's sweep (or a direct ``deliver_session``) delivers."""

    def deliver(self, host: str, sid: str) -> None:
        log.debug("no dispatcher: delivery for %s on %s left to the sweep", sid, host)


class RecordingDispatcher:
    """Remembers what it was asked (tests, benchmarks)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def deliver(self, host: str, sid: str) -> None:
        self.calls.append((host, sid))


def default_dispatcher() -> Dispatcher:
    target = os.environ.get("INBOX_DISPATCHER", "workers.dispatch:CeleryDispatcher")
    if target in ("", "none"):
        return NullDispatcher()
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
        factory = getattr(module, attr)
    except (ImportError, AttributeError) as exc:
        log.warning("dispatcher %s unavailable (%s); deliveries wait for the sweep", target, exc)
        return NullDispatcher()
    dispatcher: Dispatcher = factory()
    return dispatcher
