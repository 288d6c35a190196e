"""CPU a batch's ``send_task`` costs in the Celery dispatcher, with and without short reprs.

    python bench/dispatch_cpu.py [--url redis://127.0.0.1:6379/14] [--sends 1000] [--rounds 5]

Against a real broker (``--url``; its own key prefix, removed after each round): each round
sends ``--sends`` ``inbox.deliver_many`` tasks of ``workers.dispatch.MANY_CHUNK`` sessions
through ``CeleryDispatcher.request_many``, once as it sends them (``argsrepr`` /
``kwargsrepr`` given: a session count) and once with those two options dropped, so Celery
makes its ``saferepr`` of the session list (the dispatcher before the reprs). The two run
interleaved; this process's CPU (user + system) per 1,000 sends, median over the rounds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import redis  # noqa: E402

from bus.core.settings import Settings  # noqa: E402
from workers.app import make_app  # noqa: E402
from workers.dispatch import MANY_CHUNK, CeleryDispatcher  # noqa: E402


class _Dropping:
    """The app, with the repr options of each send dropped (Celery's own repr then)."""

    def __init__(self, app: Any, drop: bool) -> None:
        self.app, self.drop = app, drop

    def send_task(self, name: str, **options: Any) -> Any:
        if self.drop:
            options.pop("argsrepr", None)
            options.pop("kwargsrepr", None)
        return self.app.send_task(name, **options)


def _clean(url: str, prefix: str) -> None:
    r = redis.Redis.from_url(url)
    try:
        for key in r.scan_iter(match=f"{prefix}:*", count=1000):
            r.delete(key)
    finally:
        r.close()


def one_round(url: str, sends: int, drop: bool) -> float:
    """CPU seconds per 1,000 sends of one round."""
    prefix = f"bench-dispatch-{os.getpid()}"
    s = replace(Settings(), redis_url=url, broker_url=url, key_prefix=prefix)
    app = make_app(s)
    d = CeleryDispatcher(_Dropping(app, drop))
    sids = [f"sess-{n:06d}-{'x' * 20}" for n in range(MANY_CHUNK)]
    try:
        d.request_many("benchhost", sids)  # the connection and the queue's declaration
        t0 = time.process_time()
        for _ in range(sends):
            d.request_many("benchhost", sids)
        cpu = time.process_time() - t0
    finally:
        app.close()
        _clean(url, prefix)
    return cpu * 1000 / sends


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--url", default="redis://127.0.0.1:6379/14")
    p.add_argument("--sends", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    got: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(args.rounds):
        for drop in (True, False):
            got[drop].append(one_round(args.url, args.sends, drop))
    for drop, label in ((True, "Celery's repr (before)"), (False, "short reprs (now)")):
        rows = ", ".join(f"{v * 1000:.0f}" for v in got[drop])
        med = statistics.median(got[drop]) * 1000
        print(f"{label:24} CPU ms / 1,000 sends: median {med:.0f}  ({rows})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
