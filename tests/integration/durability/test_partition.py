"""A host cut off from Redis (a partition: nothing answers, nothing closes) serves again
once the path is back.

A connection that went dark mid-call is given up after ``INBOX_REDIS_TIMEOUT_S`` and the
call carried on a new connection (the broker's too: kombu's default waited forever), and
a cluster none of whose nodes answers is an outage the loops wait out, not an error that
ends them. The dark path is a TCP proxy here that stops forwarding without closing.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import redis

from bus.core.settings import Settings
from bus.store import block_chunks
from bus.store.blocking import outlasting
from bus.store.cluster import cluster_client
from bus.store.cluster_reach import ClusterUnreachable, unreachable
from bus.store.connect import open_store
from bus.store.connection import redis_client
from bus.store.outage_log import OUTAGE_ERRORS
from bus.telemetry.liveness import Heartbeat

BOUND_S = 30.0  # generous: the calls below take about one timeout (1 s) once fixed


class DarkProxy:
    """Forwards TCP connections to ``target``; :meth:`darken` leaves the connections open
    so far forwarding nothing more either way (their bytes are taken and dropped, as a
    partition drops them), while connections made after it are forwarded again."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.dark: list[threading.Event] = []
        self.socks: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target, timeout=5)
            upstream.settimeout(None)
            dark = threading.Event()
            with self.lock:
                self.dark.append(dark)
                self.socks += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b, dark), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket, dark: threading.Event) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                return
            if not data:
                with contextlib.suppress(OSError):
                    dst.shutdown(socket.SHUT_WR)
                return
            if not dark.is_set():
                with contextlib.suppress(OSError):
                    dst.sendall(data)

    def darken(self) -> None:
        with self.lock:
            for dark in self.dark:
                dark.set()

    def close(self) -> None:
        self.listener.close()
        with self.lock:
            for sock in self.socks:
                with contextlib.suppress(OSError):
                    sock.close()


@pytest.fixture
def proxy(redis_url: str) -> Iterator[DarkProxy]:
    where = urlparse(redis_url)
    if where.scheme != "redis" or not where.port:
        pytest.skip(f"the proxy needs a TCP Redis, not {redis_url}")
    p = DarkProxy(where.hostname or "127.0.0.1", where.port)
    yield p
    p.close()


def _via(url: str, port: int) -> str:
    where = urlparse(url)
    auth = f"{where.username or ''}:{where.password}@" if where.password else ""
    return f"redis://{auth}127.0.0.1:{port}{where.path or '/0'}"


def _within(call: Any, bound_s: float = BOUND_S) -> Any:
    """``call()``'s result; fails the test when it has not returned after ``bound_s``."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = call()
        except BaseException as exc:  # shown by the assertion below
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(bound_s)
    assert not t.is_alive(), f"still waiting on the dark connection after {bound_s} s"
    if "error" in out:
        raise out["error"]
    return out.get("value")


def test_a_publish_on_a_dark_broker_connection_goes_out_on_a_new_one(
    settings: Settings, redis_url: str, proxy: DarkProxy
) -> None:
    from workers.app import make_app

    s = replace(
        settings,
        broker_url=_via(redis_url, proxy.port),
        redis_timeout_s=1.0,
        redis_connect_timeout_s=1.0,
    )
    app = make_app(s)
    queue = "host.dark"
    app.send_task("inbox.deliver", kwargs={"sid": "a"}, queue=queue)  # its connection made
    proxy.darken()
    _within(lambda: app.send_task("inbox.deliver", kwargs={"sid": "b"}, queue=queue))
    plain = redis.Redis.from_url(redis_url)
    assert plain.llen(f"{settings.key_prefix}:celery:{queue}") == 2


def test_a_store_call_on_a_dark_connection_is_answered_on_a_new_one(
    settings: Settings, redis_url: str, proxy: DarkProxy
) -> None:
    s = replace(settings, redis_url=_via(redis_url, proxy.port), redis_timeout_s=1.0)
    client = redis_client(s)
    key = f"{settings.key_prefix}:dark"
    client.set(key, "1")
    proxy.darken()
    # Given up after its 1 s and carried on a new connection; redis-py's own default
    # (5 s, what the client had before INBOX_REDIS_TIMEOUT_S) is past this bound.
    assert _within(lambda: client.get(key), bound_s=4.0) == "1"


def test_a_wait_for_ever_whose_connection_goes_dark_still_gets_its_answer(
    settings: Settings, redis_url: str, proxy: DarkProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A waited send with no timeout (BLPOP for ever) and a watch's long read, on the
    # store's blocking client. Its blocks are 1 s here and its read timeout 1 s past one:
    # the dark connection is given up about 2 s on and the wait goes on over a new one.
    monkeypatch.setattr(block_chunks, "BLOCK_CHUNK_S", 1.0)
    s = replace(settings, redis_url=_via(redis_url, proxy.port), redis_timeout_s=1.0)
    store, direct = open_store(s), open_store(settings)
    sid = f"dark-{uuid.uuid4().hex[:8]}"
    waiting, reading = store.blocking_client(), store.blocking_client()
    assert store.inbox.pop_answer(waiting, sid, "m1", 0.05) is None  # their connections made
    stop = threading.Event()
    assert not store.events.read_session_streams(
        reading, {sid: "0-0"}, stream="events", count=1, block_ms=50, stop=stop
    )
    proxy.darken()
    direct.inbox.push_answers(sid, ["m1"], {"ok": True, "state": "answered"})
    direct.r.xadd(direct.k.s(sid, "events"), {"kind": "probe"})
    got = _within(lambda: store.inbox.pop_answer(waiting, sid, "m1", 0), bound_s=15.0)
    assert got is not None and json.loads(got)["state"] == "answered"
    rows = _within(
        lambda: store.events.read_session_streams(
            reading, {sid: "0-0"}, stream="events", count=1, block_ms=600_000, stop=stop
        ),
        bound_s=15.0,
    )
    assert [f["kind"] for _sid, entries in rows for _id, f in entries] == ["probe"]


@pytest.mark.parametrize(
    ("timeout_s", "kwargs_s"),
    [(None, [60.0]), (150.0, [60.0, 60.0, 30.0]), (0.5, [0.5]), (0.0, [])],
)
def test_a_wait_is_made_of_blocks_no_longer_than_the_chunk(
    timeout_s: float | None, kwargs_s: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(block_chunks.time, "monotonic", lambda: clock[0])
    got = []
    for block in block_chunks.blocks(timeout_s):
        got.append(block)
        clock[0] += block  # each block waited out in full
        if len(got) == len(kwargs_s):
            break
    assert got == kwargs_s


@pytest.mark.parametrize(
    ("timeout_s", "connect_s"),
    [(5.0, 2.0), (1.5, 0.5), (30.0, 10.0)],
)
def test_every_client_made_from_the_settings_has_their_timeouts(
    settings: Settings, timeout_s: float, connect_s: float
) -> None:
    from workers.app import BROKER_CHECK_S, make_app

    s = replace(settings, redis_timeout_s=timeout_s, redis_connect_timeout_s=connect_s)
    kwargs = redis_client(s).connection_pool.connection_kwargs
    assert (kwargs["socket_timeout"], kwargs["socket_connect_timeout"]) == (timeout_s, connect_s)
    store = open_store(s)
    for own in (store.delivery.kick_client(1.0, "t")[1], store.events.waiting_client(2.0, "t")[1]):
        # A blocking command's own connection outlasts its block by an ordinary timeout.
        assert own.connection_kwargs["socket_timeout"] > 1.0 + timeout_s - 0.01
    assert outlasting(store.r, 1.0) == 1.0 + timeout_s
    transport = make_app(s).conf.broker_transport_options
    assert transport["socket_timeout"] == timeout_s
    assert transport["socket_connect_timeout"] == connect_s
    assert transport["health_check_interval"] == BROKER_CHECK_S


@pytest.mark.parametrize(
    ("env", "timeout_s", "connect_s"),
    [
        ({}, 5.0, 2.0),
        ({"INBOX_REDIS_TIMEOUT_S": "1.5", "INBOX_REDIS_CONNECT_TIMEOUT_S": "0.5"}, 1.5, 0.5),
        ({"INBOX_REDIS_TIMEOUT_S": ""}, 5.0, 2.0),
    ],
)
def test_the_timeouts_are_read_from_the_environment(
    env: dict[str, str], timeout_s: float, connect_s: float
) -> None:
    s = Settings.from_env(env)
    assert (s.redis_timeout_s, s.redis_connect_timeout_s) == (timeout_s, connect_s)
    again = Settings.from_env(s.to_env())
    assert (again.redis_timeout_s, again.redis_connect_timeout_s) == (timeout_s, connect_s)


@pytest.mark.parametrize("raw", ["0", "-1", "soon"])
def test_a_timeout_that_is_no_time_is_refused(raw: str) -> None:
    with pytest.raises(ValueError, match="INBOX_REDIS_TIMEOUT_S"):
        Settings.from_env({"INBOX_REDIS_TIMEOUT_S": raw})


def _cause(exc: BaseException, cause: BaseException) -> BaseException:
    exc.__cause__ = cause
    return exc


@pytest.mark.parametrize(
    ("exc", "is_unreachable"),
    [
        (_cause(redis.RedisClusterException("cannot be connected"), redis.ConnectionError()), True),
        (_cause(redis.RedisClusterException("cannot be connected"), redis.TimeoutError()), True),
        (
            _cause(redis.RedisClusterException("cannot be connected"), OSError(113, "no route")),
            True,
        ),
        (redis.RedisClusterException("no cause"), False),
        (_cause(redis.RedisClusterException("disagree"), ValueError()), False),
        (_cause(ClusterUnreachable("already"), redis.ConnectionError()), False),
        (redis.ConnectionError("a standalone server's"), False),
    ],
)
def test_which_cluster_errors_mean_no_node_answered(
    exc: BaseException, is_unreachable: bool
) -> None:
    assert unreachable(exc) is is_unreachable


def test_a_cluster_client_with_no_node_to_reach_fails_as_an_outage() -> None:
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]  # closed below: nothing listens there
    with pytest.raises(OUTAGE_ERRORS) as got:
        cluster_client(f"redis://127.0.0.1:{port},127.0.0.1:{port}", connect_timeout_s=1.0)
    assert isinstance(got.value, ClusterUnreachable)


@pytest.mark.slow
def test_a_cluster_whose_nodes_all_went_away_is_an_outage_and_a_heartbeat_survives_it(
    tmp_path: Path, settings: Settings
) -> None:
    from tests.support.local_servers import EmbeddedCluster, free_cluster_ports

    cluster = EmbeddedCluster(tmp_path, free_cluster_ports(1)).start()
    try:
        s = replace(settings, redis_url=cluster.url, redis_cluster=True, redis_timeout_s=1.0)
        store = open_store(s)
        store.r.set(store.k.beat("x"), "1")
        beat = Heartbeat(type("B", (), {"store": store})(), "hosta")
        beat.beat()
        kicks, pools = store.delivery.kick_client(1.0, "inbox-kick:test")  # a pop's own client
    finally:
        cluster.stop()
    with pytest.raises(OUTAGE_ERRORS) as got:
        store.delivery.kick_alive("hosta", 1000)
    assert isinstance(got.value, ClusterUnreachable)
    with pytest.raises(OUTAGE_ERRORS) as got:
        store.delivery.take_kicks("hosta", "loop", 1)  # its slot table is refreshed in vain
    assert isinstance(got.value, ClusterUnreachable)
    with pytest.raises(OUTAGE_ERRORS) as got:
        kicks.blmove("k{a}", "l{a}", 0.1)
    assert isinstance(got.value, ClusterUnreachable)
    pools.disconnect()
    beat.beat()  # swallowed: the heartbeat thread carries on
    beat.progress()
