"""Bounded waits for state a test can only observe by reading it."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(
    predicate: Callable[[], object],
    timeout: float = 15.0,
    what: str = "condition",
    interval: float = 0.02,
) -> object:
    """Poll ``predicate`` until truthy, bounded; for state only observable by reading it."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
