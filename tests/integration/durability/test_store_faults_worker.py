"""A worker whose store refuses writes (a failed save: MISCONF) waits and says so once, with
the reason and the fix, instead of failing: it is still running, and says when the store
takes writes again."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import redis

from bus.core.settings import Settings
from bus.ops.embedded import server_binary
from tests.support.durable_servers import fail_saves, server
from tests.support.waiting import wait_for
from tests.support.worker_proc import WorkerProcess


def said(w: WorkerProcess, words: str) -> bool:
    return any(words in line for line in list(w.log))


def test_the_worker_waits_out_a_store_refusing_writes(
    settings: Settings, tmp_path: Path, start_worker: Callable[..., WorkerProcess]
) -> None:
    data = tmp_path / "data"
    with server(server_binary(), data, "--save", "3600 1") as (url, _proc):
        s = replace(settings, redis_url=url, broker_url=url)
        w = start_worker(s)
        fail_saves(url, data)
        wait_for(lambda: said(w, "the store refuses writes"), 20, "the worker to say it waits")
        line = next(x for x in w.log if "the store refuses writes" in x)
        assert "waiting" in line and "free space" in line and "MISCONF" in line
        assert w.proc.poll() is None  # still running, not restarting
        redis.Redis.from_url(url).config_set("stop-writes-on-bgsave-error", "no")
        wait_for(lambda: said(w, "Redis back after"), 20, "the worker to say it is back")
        assert w.proc.poll() is None
        assert not said(w, "Traceback"), "\n".join(list(w.log))
