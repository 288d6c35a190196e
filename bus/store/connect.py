"""The store of a bus, on the settings' Redis (or a client given): one call, one door."""

from __future__ import annotations

from typing import Any

from bus.core.settings import Settings

from .connection import redis_client
from .keys import Keys
from .redis_errors import NOT_ANSWERING, unavailable
from .store import Store


def open_store(settings: Settings, client: Any = None) -> Store:
    """A :class:`Store` on ``client``, else on a client made from ``settings``; a server
    that does not answer (a cluster client connects as it is made) is ``Unavailable``."""
    try:
        client = client or redis_client(settings)
    except NOT_ANSWERING as exc:
        raise unavailable(exc) from exc
    return Store(client, Keys(settings.key_prefix), lock_ttl_ms=int(settings.lock_ttl_s * 1000))
