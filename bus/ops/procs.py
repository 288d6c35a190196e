"""Child processes: ``inbox worker``'s Celery arguments, and children that die with
their parent (``inbox up``, ``compose/local.py``, the embedded Redis, Flower)."""

from __future__ import annotations

import signal
import sys
from typing import Any

from bus.core.settings import Settings


def worker_argv(settings: Settings, concurrency: int, pool: str, loglevel: str) -> list[str]:
    """``inbox worker``'s arguments to ``celery -A workers``: this host's queue and the
    shared one, no gossip nor mingle (a worker's start waits for neither)."""
    from bus.telemetry.liveness import SHARED_QUEUE, host_queue

    return [
        "worker",
        *("-Q", f"{SHARED_QUEUE},{host_queue(settings.host)}"),
        *("-n", f"{settings.host}@%h"),
        *("-c", str(concurrency), "-P", pool, "-l", loglevel),
        "--without-gossip",
        "--without-mingle",
    ]


def _load_prctl() -> Any:
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


# Looked up here, in the parent: between fork and exec a child of a threaded process must
# not import or dlopen (another thread may have held those locks at the fork).
_PRCTL = _load_prctl() if sys.platform.startswith("linux") else None


def die_with_parent() -> None:
    """In a child before exec: SIGTERM it when the thread that started it ends (Linux's
    PR_SET_PDEATHSIG), so children in their own sessions never outlive a SIGKILLed
    supervisor. Elsewhere nothing happens."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
