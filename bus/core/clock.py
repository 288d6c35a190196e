"""The bus's clock, injectable: code that decides by time asks a :class:`Clock`.

:class:`SystemClock` reads the wall clock; :class:`ManualClock` is moved by a test, so a
test of a debounce or a sweep interval moves time instead of sleeping it.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Milliseconds since the epoch."""
        ...


class SystemClock:
    """The wall clock."""

    def now_ms(self) -> int:
        return int(time.time() * 1000)


class ManualClock:
    """A clock that stands still until :meth:`advance` or :meth:`set` moves it."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.ms = start_ms

    def now_ms(self) -> int:
        return self.ms

    def advance(self, ms: int) -> int:
        self.ms += ms
        return self.ms

    def set(self, ms: int) -> None:
        self.ms = ms


SYSTEM = SystemClock()
