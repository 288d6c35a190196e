"""Bounded floods: each sender's token bucket (``INBOX_SEND_RATE``, ``INBOX_SEND_BURST``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from bus.core.errors import RateLimited

if TYPE_CHECKING:
    from bus.core.settings import Settings
    from bus.store.store import Store


class SendRate:
    """Takes one token from a sender's bucket on one store (a provider, called on use)."""

    def __init__(self, store: Callable[[], Store], settings: Settings) -> None:
        self._store, self.settings = store, settings

    def limit(self, sender: str) -> None:
        """One token from the sender's bucket, or ``rate_limited`` (nothing stored)."""
        s = self.settings
        if s.send_rate <= 0:
            return
        if not self._store().queue.take_send_token(sender, s.send_rate, s.send_burst):
            raise RateLimited(
                f"{sender} is sending faster than {s.send_rate:g}/s (burst {s.send_burst:g});"
                " nothing was stored, try again shortly",
                code="rate_limited",
            )
