"""A long blocking read as blocks of at most :data:`BLOCK_CHUNK_S`.

The clients commands block on (:mod:`bus.store.blocking`) have a read timeout that
outlasts one block by the ordinary call timeout, so a connection gone dark under a wait
is given up, and the wait goes on over a new one, instead of lasting for ever.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

# The longest single blocking read; a longer wait is several in a row.
BLOCK_CHUNK_S = 60.0


def blocks(timeout_s: float | None) -> Iterator[float]:
    """The blocks (seconds, each at most :data:`BLOCK_CHUNK_S`) a wait of ``timeout_s``
    is made of, as the caller runs them; ``None`` waits for ever. Each is computed when
    the previous one is over, so time spent between them counts."""
    end = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        left = BLOCK_CHUNK_S if end is None else end - time.monotonic()
        if left <= 0:
            return
        yield min(left, BLOCK_CHUNK_S)
