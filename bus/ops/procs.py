"""Child processes: ``inbox worker``'s Celery arguments, and children that die with
their parent (``inbox up``, ``compose/local.py``, the embedded Redis, Flower)."""

from __future__ import annotations

import os
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


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def tree_cpu_s(pid: int) -> float | None:
    """CPU seconds (user and system) ``pid`` and its descendants have used, from
    ``/proc`` (Linux); ``None`` where that cannot be read (another system, gone)."""
    total, todo, seen = 0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            with open(f"/proc/{p}/stat", "rb") as f:
                stat = f.read()
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            if p == pid:
                return None
            continue  # a child gone meanwhile: its time is gone with it
        fields = stat[stat.rindex(b")") + 2 :].split()  # after the name, which may hold spaces
        total += int(fields[11]) + int(fields[12])  # utime, stime
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/children", "rb") as f:
                    todo.extend(int(c) for c in f.read().split())
            except OSError:
                continue
    return total / _TICK
