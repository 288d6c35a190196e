"""The server memory settings the scheduler keeps (bus.store.server_memory), on stock servers of the
test's own: set where the default is in force, the operator's own value kept, a server
refusing CONFIG said in ``inbox status``; and what an idle session then costs."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from bus.api import Bus
from bus.core.settings import Settings
from bus.delivery.dispatch import RecordingDispatcher
from bus.ops.embedded import server_binary
from bus.store import server_memory
from bus.store.compaction import compact_sessions
from bus.store.server_memory import WANTED, Wanted, plan, worst
from tests.support.local_servers import free_port
from tests.support.waiting import wait_for

STREAM = WANTED[0]


@pytest.mark.parametrize(
    ("found", "state"),
    [(None, "unknown"), ("1024", "ok"), ("4096", "set"), ("2048", "kept"), ("512", "kept")],
)
def test_what_the_bus_does_with_a_setting_it_finds(found: str | None, state: str) -> None:
    assert plan(found, STREAM) == state


@pytest.mark.parametrize(
    ("states", "one"),
    [(["ok", "ok"], "ok"), (["set", "ok"], "set"), (["ok", "kept"], "kept"), ([], "ok")],
)
def test_a_clusters_nodes_say_one_state(states: list[str], one: str) -> None:
    assert worst(states) == one


def test_each_wanted_setting_raises_a_default_to_the_bus_value() -> None:
    for want in WANTED:
        assert isinstance(want, Wanted) and int(want.value) != int(want.default)


def _binary() -> str:
    return shutil.which("redis-server") or server_binary()


@pytest.fixture
def stock(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """Start a redis-server with its defaults (but the port, the dir, no persistence,
    and the given extra arguments); its URL."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(*extra: str) -> str:
        # Another test process may take the same free port first: then this server exits
        # and the one answering is the other's. Only our own process's answer counts.
        for _ in range(5):
            port = free_port()
            d = tmp_path / str(port)
            d.mkdir()
            args = [_binary(), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(d)]
            proc = subprocess.Popen(
                [*args, "--save", "", "--appendonly", "no", *extra],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            procs.append(proc)
            url = f"redis://127.0.0.1:{port}/0"
            client = redis.Redis.from_url(url)

            def answers(proc: subprocess.Popen[bytes] = proc, client: redis.Redis = client) -> bool:
                if proc.poll() is not None:
                    return True  # it exited: try another port
                try:
                    return bool(client.ping())
                except redis.RedisError:
                    return False

            wait_for(answers, 20, "the stock server")
            own = proc.poll() is None and int(client.info("server")["process_id"]) == proc.pid
            client.close()
            if own:
                return url
        raise RuntimeError("no stock server of this test's own started")

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(10)


def _bus(url: str, tmp_path: Path, **kw: object) -> Bus:
    s = Settings(home=tmp_path / "home", host="hosta", redis_url=url, key_prefix="m", **kw)  # type: ignore[arg-type]
    return Bus(s, dispatcher=RecordingDispatcher())


def _config(url: str, name: str) -> str:
    c = redis.Redis.from_url(url, decode_responses=True)
    try:
        got = c.config_get(name)
        if name not in got:  # Redis 6.2 knows the ziplist name only
            name = name.replace("listpack", "ziplist")
            got = c.config_get(name)
        return str(got[name])
    finally:
        c.close()


def test_the_defaults_are_set_and_status_says_so(stock: Callable[..., str], tmp_path: Path) -> None:
    url = stock()
    bus = _bus(url, tmp_path)
    assert bus.status()["memory_settings"] == {}  # not checked yet
    out = server_memory.keep(bus.store)
    assert {name: row["state"] for name, row in out.items()} == {
        "stream-node-max-bytes": "set",
        "hash-max-listpack-value": "set",
    }
    assert _config(url, "stream-node-max-bytes") == "1024"
    assert _config(url, "hash-max-listpack-value") == "1024"
    again = server_memory.keep(bus.store)
    assert {row["state"] for row in again.values()} == {"ok"}
    status = bus.status()["memory_settings"]
    assert status["stream-node-max-bytes"]["state"] == "ok"
    assert status["stream-node-max-bytes"]["found"] == [1024]


def test_an_operators_own_value_is_kept(stock: Callable[..., str], tmp_path: Path) -> None:
    url = stock("--stream-node-max-bytes", "2048")
    bus = _bus(url, tmp_path)
    out = server_memory.keep(bus.store)
    assert out["stream-node-max-bytes"]["state"] == "kept"
    assert "own value is kept" in out["stream-node-max-bytes"]["why"]
    assert _config(url, "stream-node-max-bytes") == "2048"
    assert out["hash-max-listpack-value"]["state"] == "set"


def test_a_server_refusing_config_is_said_in_status(
    stock: Callable[..., str], tmp_path: Path
) -> None:
    url = stock("--rename-command", "CONFIG", "")
    bus = _bus(url, tmp_path)
    server_memory.keep(bus.store)
    status = bus.status()["memory_settings"]
    for name in ("stream-node-max-bytes", "hash-max-listpack-value"):
        assert status[name]["state"] == "refused"
        assert "the server refuses CONFIG" in status[name]["why"]
        assert f"set {name} 1024" in status[name]["why"]


def test_switched_off_the_server_is_left_alone(stock: Callable[..., str], tmp_path: Path) -> None:
    url = stock()
    bus = _bus(url, tmp_path, memory_settings=False)
    out = server_memory.keep(bus.store, enabled=bus.settings.memory_settings)
    assert {row["state"] for row in out.values()} == {"off"}
    assert _config(url, "stream-node-max-bytes") == "4096"


def test_an_idle_session_costs_at_most_2_kb_on_a_stock_server_the_bus_set(
    stock: Callable[..., str], tmp_path: Path
) -> None:
    url = stock()
    bus = _bus(url, tmp_path, send_rate=0.0)
    server_memory.keep(bus.store)
    r = bus.store.r

    def usage() -> int:
        return sum(int(r.memory_usage(k, samples=0) or 0) for k in r.scan_iter(match="m:*"))

    bus.open_session("warm")  # the registry's and the metrics' own keys
    bus.send({"from": "hosta:lane", "to_id": "warm", "text": "hello", "class": "action"})
    bus.deliver_session("warm")
    before = usage()
    bus.open_session("idle")
    bus.turn("idle", "start")
    bus.send({"from": "hosta:lane", "to_id": "idle", "text": "msg 1", "class": "action"})
    bus.deliver_session("idle")
    bus.drain("idle")
    bus.turn("idle", "end", answer="ok")
    # The scheduler's pass once the session is quiet: its events older than the server's
    # now (in the same millisecond as the turn's end they are not quiet yet, and stay).
    last = r.xrevrange(bus.store.k.s("idle", "events"), count=1)
    newest_ms = int(str(last[0][0]).split("-")[0]) if last else 0
    wait_for(lambda: bus.store.server_time_ms() > newest_ms, 5, "a millisecond on")
    compact_sessions(bus.store, ["idle"], 0)
    assert usage() - before <= 2048


def test_every_node_of_a_stock_cluster_gets_the_settings(tmp_path: Path) -> None:
    from dataclasses import replace

    from tests.support.local_servers import EmbeddedCluster, free_cluster_ports

    with EmbeddedCluster(tmp_path / "c", free_cluster_ports(3), memory_args=False) as cluster:
        bus = _bus(cluster.url, tmp_path)
        bus = Bus(replace(bus.settings, redis_cluster=True), dispatcher=RecordingDispatcher())
        out = server_memory.keep(bus.store)
        assert {row["state"] for row in out.values()} == {"set"}
        for port in cluster.ports:
            assert _config(f"redis://127.0.0.1:{port}/0", "stream-node-max-bytes") == "1024"
            assert _config(f"redis://127.0.0.1:{port}/0", "hash-max-listpack-value") == "1024"
        again = server_memory.keep(bus.store)
        assert again["stream-node-max-bytes"] == {"want": 1024, "state": "ok", "found": [1024]}
        assert bus.status()["memory_settings"]["hash-max-listpack-value"]["state"] == "ok"
