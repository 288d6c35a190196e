"""The Python API: ``from bus import connect; b = connect()``.

One :class:`Bus` per connection. Every surface (CLI, MCP server, HTTP gateway, Celery
tasks) parses its input and makes one call here. :mod:`bus.api.facade` builds the
services (the composition root); its parts group the calls by concept.

May import: ``bus.services``, ``bus.delivery``, ``bus.trust``, ``bus.telemetry``,
``bus.store``, ``bus.core``; never ``bus.ops`` or ``bus.surfaces``.
"""

from __future__ import annotations

from bus.services.sessions import check_host
from bus.store.connection import redis_client

from .facade import Bus, connect

__all__ = ["Bus", "check_host", "connect", "redis_client"]
