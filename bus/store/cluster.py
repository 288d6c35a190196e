"""The store on a Redis Cluster (``INBOX_REDIS_CLUSTER=1``): the client and two adapters.

Every key carries a hash tag (one session, one thread, one handle, or a global index;
see :mod:`bus.store.keys`) and no Lua script or MULTI touches two tags, so each atomic step
runs in one slot. What a single server does in one command across sessions is done per
slot here:

- a pipeline that also runs scripts (redis-py refuses ``EVALSHA`` inside a cluster
  pipeline) becomes an :class:`OrderedBatch`: runs of plain commands go as one cluster
  pipeline (one round trip per node), each script as its own call, in the queued order;
- independent script calls (:func:`run_per_node`) go as one pipeline per node;
- a multi-stream ``XREAD`` (``inbox watch --all``) becomes :func:`read_streams`: one
  non-blocking ``XREAD`` per stream, pipelined per node, polled until ``block_ms``.

The Celery broker is not here: kombu has no cluster transport, so the broker stays a
standalone Redis (``INBOX_BROKER_URL``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import RedisClusterException

# A cluster's multi-stream read polls: first after POLL_S, each wait twice the last while
# nothing comes, up to POLL_MAX_S (a quiet watch of many lanes costs a few reads a second,
# not one every POLL_S).
POLL_S = 0.05
POLL_MAX_S = 0.4

# What a Redis that does not answer raises (a cluster client that finds no node raises
# RedisClusterException, which is not a RedisError; a dropped socket, OSError).
REDIS_ERRORS = (redis.RedisError, RedisClusterException, OSError)


def split_nodes(url: str) -> tuple[str, list[tuple[str, int]]]:
    """A cluster URL may name several nodes, ``redis://[auth@]h1:p1,h2:p2[/0]``: the URL
    with its first node, and the others as ``(host, port)``. Pure; a node that is not
    ``host:port`` is refused (ValueError)."""
    scheme, sep, rest = url.partition("://")
    auth, at, where = rest.rpartition("@")
    hosts, slash, path = where.partition("/")
    names = hosts.split(",")
    if not sep or len(names) < 2:
        return url, []
    others = []
    for name in names[1:]:
        host, _, port = name.rpartition(":")
        host = host.strip("[]")  # an IPv6 address in brackets
        if not host or not port.isdigit():
            raise ValueError(f"cluster node {name!r} in INBOX_REDIS_URL is not host:port")
        others.append((host, int(port)))
    return f"{scheme}://{auth}{at}{names[0]}{slash}{path}", others


def cluster_client(
    url: str, *, timeout_s: float = 5.0, connect_timeout_s: float = 2.0
) -> RedisCluster:
    """A cluster client from a URL naming any node, or several (``h1:p1,h2:p2``: tried in
    turn, so a client starting while one of them is down still connects); it discovers
    the others. A call waits ``timeout_s`` for its answer and a connect
    ``connect_timeout_s`` (``INBOX_REDIS_TIMEOUT_S``, ``INBOX_REDIS_CONNECT_TIMEOUT_S``);
    a command that blocks on it must block for less. No node answering raises
    :class:`~bus.store.cluster_reach.ClusterUnreachable` (an outage, as a standalone
    server's ``ConnectionError``)."""
    from .cluster_reach import as_outage, reraised

    first, others = split_nodes(url)
    nodes = [ClusterNode(host, port) for host, port in others]
    client = reraised(RedisCluster.from_url)(
        first,
        startup_nodes=nodes,
        decode_responses=True,
        socket_timeout=timeout_s,
        socket_connect_timeout=connect_timeout_s,
    )
    return as_outage(client)


def is_cluster(client: object) -> bool:
    return isinstance(client, RedisCluster)


class OrderedBatch:
    """A stand-in for ``pipeline(transaction=False)`` on a cluster that may run scripts.

    Commands are queued by attribute (``batch.hget(...)``, and ``Script(..., client=batch)``
    queues an ``evalsha``); :meth:`execute` returns the replies in the queued order.
    ``scripts`` maps a SHA to its source, to load it again on a node that lost it.
    """

    def __init__(self, client: RedisCluster, scripts: dict[str, str]) -> None:
        self.client = client
        self.scripts = scripts
        self.queued: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Callable[..., OrderedBatch]:
        if name.startswith("_"):
            raise AttributeError(name)

        def queue(*args: Any, **kwargs: Any) -> OrderedBatch:
            self.queued.append((name, args, kwargs))
            return self

        return queue

    def _evalsha(self, sha: str, *args: Any) -> Any:
        try:
            return self.client.evalsha(sha, *args)
        except redis.exceptions.NoScriptError:
            self.client.script_load(self.scripts[sha])
            return self.client.evalsha(sha, *args)

    def execute(self) -> list[Any]:
        queued, self.queued = self.queued, []
        out: list[Any] = []
        run: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

        def flush() -> None:
            if not run:
                return
            pipe = self.client.pipeline(transaction=False)
            for name, args, kwargs in run:
                getattr(pipe, name)(*args, **kwargs)
            out.extend(pipe.execute())
            run.clear()

        for name, args, kwargs in queued:
            if name == "evalsha":
                flush()
                out.append(self._evalsha(*args, **kwargs))
            else:
                run.append((name, args, kwargs))
        flush()
        return out


def run_per_node(
    client: RedisCluster, calls: list[tuple[Any, ...]], sources: dict[str, str]
) -> list[Any]:
    """Independent ``("EVALSHA", sha, numkeys, *keys, *args)`` calls, each on one slot: one
    pipeline per node (its scripts' ``SCRIPT LOAD`` at its head, so none is missing), not a
    round trip per call. A call the node answers ``MOVED``/``ASK`` (a slot moving, a
    failover) did not run there: it runs again in turn through the cluster client, which
    follows the redirect. The replies in the calls' order; the first error raised."""
    by_node: dict[str, tuple[Any, list[int]]] = {}
    for n, call in enumerate(calls):
        node = client.nodes_manager.get_node_from_slot(client.keyslot(call[3]))
        by_node.setdefault(node.name, (node, []))[1].append(n)
    out: list[Any] = [None] * len(calls)
    for node, ns in by_node.values():
        shas = list(dict.fromkeys(calls[n][1] for n in ns))
        pipe = client.get_redis_connection(node).pipeline(transaction=False)
        for sha in shas:
            pipe.execute_command("SCRIPT LOAD", sources[sha])
        for n in ns:
            pipe.execute_command(*calls[n])
        replies = pipe.execute(raise_on_error=False)[len(shas) :]
        for n, reply in zip(ns, replies, strict=True):
            moved = isinstance(reply, redis.ResponseError) and str(reply).startswith(
                ("MOVED", "ASK")
            )
            out[n] = client.execute_command(*calls[n]) if moved else reply
    for reply in out:
        if isinstance(reply, Exception):
            raise reply
    return out


class Poll:
    """A cluster watch's wait between reads, kept from one :func:`read_streams` call to the
    next: a quiet watch polls every :data:`POLL_MAX_S`, one that just heard every
    :data:`POLL_S` first."""

    def __init__(self) -> None:
        self.wait = POLL_S


def read_streams(
    client: Any,
    positions: dict[str, str],
    *,
    count: int,
    block_ms: int,
    stop: threading.Event,
    poll: Poll | None = None,
) -> list[tuple[str, list[tuple[str, dict[str, str]]]]]:
    """New entries of several streams after their positions: ``[(key, entries)]``.

    A standalone server answers one blocking ``XREAD``. On a cluster each stream sits in
    its own slot, so each is read without blocking, pipelined per node, and the read is
    repeated until something arrives, ``block_ms`` passes or ``stop``: after :data:`POLL_S`,
    then each wait doubled up to :data:`POLL_MAX_S`. With ``poll`` the wait goes on from
    the last call's (a quiet call waits before its first read, which would repeat the
    last call's final one).
    """
    if not is_cluster(client):
        reply = client.xread(positions, count=count, block=block_ms)
        if isinstance(reply, dict):  # RESP3 answers a dict key -> entries
            return [(str(k), v[0] if v and isinstance(v[0], list) else v) for k, v in reply.items()]
        return [(str(k), entries) for k, entries in reply or []]
    poll = poll or Poll()
    waited = 0.0
    keys = list(positions)
    while True:
        if waited > 0 or poll.wait <= POLL_S:
            pipe = client.pipeline(transaction=False)
            for key in keys:
                pipe.xrange(key, min=f"({positions[key]}", count=count)
            rows = [(k, e) for k, e in zip(keys, pipe.execute(), strict=True) if e]
            if rows:
                poll.wait = POLL_S
                return [(str(k), [(str(i), f) for i, f in e]) for k, e in rows]
        if waited * 1000 >= block_ms or stop.is_set():
            return []
        wait = min(poll.wait, max(0.001, block_ms / 1000 - waited))
        stop.wait(wait)
        waited += wait
        poll.wait = min(poll.wait * 2, POLL_MAX_S)
