"""The slow-log sampler (bench/cpu_share.py's): each command and script of the window counted
under the process that sent it, a script named by its file and timed.

On a throw-away server: the sampler sets the slow log's options for its window."""

from __future__ import annotations

import os
import tempfile
from contextlib import ExitStack
from pathlib import Path

import redis

from bus.store.lua_files import lua_source
from tests.support.local_servers import stock_server
from tests.support.slowlog import Slowlog


def test_the_slowlog_sampler_counts_and_times_each_script_by_its_name() -> None:
    with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        url = stock_server(Path(tmp), stack)
        node = redis.Redis.from_url(url)
        saved = node.config_get("slowlog-log-slower-than")
        node.set("k", "v")
        sha = node.script_load(lua_source("queue_trim"))
        log = Slowlog([node], {os.getpid(): "test"})
        try:
            for _ in range(5):
                node.evalsha(sha, 2, "stream", "cursor")
            node.get("k")
            log.poll()
        finally:
            log.close()
        assert log.counts[("test", "lua:queue_trim")] == 5
        assert log.counts[("test", "get")] == 1
        # The commands the script ran are logged too, from no client: "(lua)", and not
        # timed again (their time is inside the script's).
        assert log.counts[("(lua)", "xlen")] == 5
        assert ("?", "xlen") not in log.counts
        assert set(log.micros) == {"lua:queue_trim", "get"}
        assert log.micros["lua:queue_trim"] > 0
        # Its options are put back when it closes.
        assert node.config_get("slowlog-log-slower-than") == saved
