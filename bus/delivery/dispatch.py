"""How the library asks a host's worker to deliver, without importing Celery.

The bus calls ``dispatcher.request(host, sid)`` after storing a message (the delivery
itself is the engine's run, bus.delivery.engine). The default
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
    def request(self, host: str, sid: str) -> None:
        """Ask ``host``'s worker to run the delivery for session ``sid``."""


def request_many(dispatcher: Dispatcher, host: str, sids: list[str]) -> None:
    """Ask ``host``'s worker for the deliveries of many sessions at once.

    A dispatcher with its own ``request_many`` sends them in a few messages (the Celery one:
    one task per chunk, run concurrently in the worker), so a burst of due wakes does not
    queue one task per session behind the others; any other dispatcher gets one
    ``request`` per session.
    """
    many = getattr(dispatcher, "request_many", None)
    if many is not None:
        many(host, sids)
        return
    for sid in sids:
        dispatcher.request(host, sid)


class NullDispatcher:
    """Dispatches nothing: the scheduler's sweep (or a direct ``deliver_session``) delivers."""

    def request(self, host: str, sid: str) -> None:
        log.debug("no dispatcher: delivery for %s on %s left to the sweep", sid, host)


class RecordingDispatcher:
    """Remembers what it was asked (tests, benchmarks)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def request(self, host: str, sid: str) -> None:
        self.calls.append((host, sid))

    def request_many(self, host: str, sids: list[str]) -> None:
        self.calls.extend((host, sid) for sid in sids)


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
