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
import threading
from collections.abc import Callable
from typing import Any, Protocol

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


class LazyDispatcher:
    """``make()``'s dispatcher, made on first use. Behind the kick list (the host's loops
    alive), a sending process never uses its fallback, so it never imports it: the
    default's import (Celery, kombu) costs a send from a fresh process several times the
    send itself."""

    def __init__(self, make: Callable[[], Dispatcher]) -> None:
        self._make = make
        self._made: Dispatcher | None = None
        self._lock = threading.Lock()

    @property
    def made(self) -> bool:
        return self._made is not None

    def resolve(self) -> Dispatcher:
        """The dispatcher, made now if it was not yet."""
        if self._made is None:
            with self._lock:
                if self._made is None:
                    self._made = self._make()
        return self._made

    def __getattr__(self, name: str) -> Any:
        # The made dispatcher's own parts (a RecordingDispatcher's calls, Celery's app).
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.resolve(), name)

    def request(self, host: str, sid: str) -> None:
        self.resolve().request(host, sid)

    def request_many(self, host: str, sids: list[str]) -> None:
        request_many(self.resolve(), host, sids)


def made_now(dispatcher: Dispatcher) -> Dispatcher:
    """``dispatcher`` with its lazy fallback made now (a spare's warm-up: the imports done
    before it takes over, not at its first fallback)."""
    part = getattr(dispatcher, "fallback", dispatcher)
    if isinstance(part, LazyDispatcher):
        part.resolve()
    return dispatcher


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
