"""The store on a Redis Cluster (``INBOX_REDIS_CLUSTER=1``): the client and two adapters.

Every key carries a hash tag (one session, one thread, one handle, or a global index;
see :mod:`bus.store.keys`) and no Lua script or MULTI touches two tags, so each atomic step
runs in one slot. What a single server does in one command across sessions is done per
slot here:

- a pipeline that also runs scripts (redis-py refuses ``EVALSHA`` inside a cluster
  pipeline) becomes an :class:`OrderedBatch`: its commands and scripts go as one pipeline
  per node (:func:`run_commands`), each key's in the queued order;
- independent script calls (:func:`run_per_node`) go the same way;
- a multi-stream ``XREAD`` (``inbox watch --all``) becomes :func:`read_streams`: one
  non-blocking ``XREAD`` per stream, pipelined per node, polled until ``block_ms``.
- a read that blocks longer than the shared client's sockets allow (a receipt's wait, a
  kick loop's pop) gets a cluster client of its own (:func:`own_cluster_client`).

The Celery broker is not here: kombu has no cluster transport, so the broker stays a
standalone Redis (``INBOX_BROKER_URL``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import AskError, NoScriptError, RedisClusterException, TryAgainError

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


class ClusterPools:
    """The ``pool`` :func:`own_cluster_client` hands back: ``disconnect()`` closes the
    client's connections to every node."""

    def __init__(self, client: RedisCluster) -> None:
        self.client = client

    def disconnect(self) -> None:
        self.client.close()


def own_cluster_client(
    client: RedisCluster, *, socket_timeout: float | None, name: str | None
) -> tuple[RedisCluster, ClusterPools]:
    """A cluster client of its own on ``client``'s cluster (its nodes, password, TLS and
    decoding), each connection with this read timeout (``None``: none) and ``name`` in
    ``CLIENT LIST`` (if given): for a read that blocks longer than the shared client's
    socket allows (5 s by default).
    The caller disconnects the pools it comes with. No node answering, now or at a later
    slot-table refresh, raises :class:`~bus.store.cluster_reach.ClusterUnreachable` (an
    outage), as on :func:`cluster_client`'s."""
    kwargs = {
        k: v
        for k, v in client.nodes_manager.connection_kwargs.items()
        if k not in ("host", "port", "db", "retry", "socket_timeout", "client_name")
    }
    from .cluster_reach import as_outage, reraised

    nodes = [ClusterNode(n.host, n.port) for n in client.get_nodes()]
    if name is not None:
        kwargs["client_name"] = name
    own = reraised(RedisCluster)(startup_nodes=nodes, socket_timeout=socket_timeout, **kwargs)
    return as_outage(own), ClusterPools(own)


def is_cluster(client: object) -> bool:
    return isinstance(client, RedisCluster)


Command = tuple[tuple[Any, ...], dict[str, Any]]  # (arguments, redis-py's parse options)

# What a node answers for a call it did not run: the slot is served elsewhere (MOVED),
# moving (ASK), or its keys are split by a move under way (TRYAGAIN).
_REDIRECTS = (AskError, TryAgainError)  # MovedError is an AskError


class OrderedBatch:
    """A stand-in for ``pipeline(transaction=False)`` on a cluster that may run scripts.

    Commands are queued by attribute (``batch.hget(...)``, and ``Script(..., client=batch)``
    queues an ``evalsha``); :meth:`execute` sends them all, scripts and plain commands, as
    one pipeline per node (:func:`run_commands`) and returns the replies in the queued
    order. ``scripts`` maps a SHA to its source, loaded at the head of each node's pipeline.
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

    def execute(self) -> list[Any]:
        queued, self.queued = self.queued, []
        if not queued:
            return []
        # redis-py's own command methods turn each call into its arguments and parse
        # options: queued on a node client's pipeline that is never sent.
        recorder = self.client.get_redis_connection(self.client.get_default_node()).pipeline(
            transaction=False
        )
        for name, args, kwargs in queued:
            getattr(recorder, name)(*args, **kwargs)
        commands: list[Command] = list(recorder.command_stack)
        recorder.reset()
        return raise_first(run_commands(self.client, commands, self.scripts))


def run_commands(
    client: RedisCluster, commands: list[Command], sources: dict[str, str]
) -> list[Any]:
    """``commands`` (each on one slot) as one pipeline per node, each node's in their
    order, with a ``SCRIPT LOAD`` of its ``EVALSHA`` calls' scripts at its head (so none is
    missing): the replies (an error as its exception) in the commands' order.

    A command's keys live on one node, so each key's commands keep their order. A command
    the node answers ``MOVED``/``ASK``/``TRYAGAIN`` (a slot moved or moving, a failover), or
    ``NOSCRIPT`` (its scripts flushed since), did not run: it runs again in turn through
    the cluster client, which follows the redirect (and refreshes its slot map); a node
    that does not answer has its commands run again in turn the same way."""
    by_node: dict[str, tuple[Any, list[int]]] = {}
    for n, (args, _options) in enumerate(commands):
        slot = client.determine_slot(*args)
        if slot is None:
            raise RedisClusterException(f"{args[0]} names no key: not for a batch")
        node = client.nodes_manager.get_node_from_slot(slot)
        by_node.setdefault(node.name, (node, []))[1].append(n)
    out: list[Any] = [None] * len(commands)
    again: list[int] = []
    for node, ns in by_node.values():
        shas = list(dict.fromkeys(commands[n][0][1] for n in ns if _is_evalsha(commands[n])))
        pipe = client.get_redis_connection(node).pipeline(transaction=False)
        pipe.command_stack.extend((("SCRIPT LOAD", sources[sha]), {}) for sha in shas)
        pipe.command_stack.extend((commands[n][0], dict(commands[n][1])) for n in ns)
        try:
            replies = pipe.execute(raise_on_error=False)[len(shas) :]
        except (redis.ConnectionError, redis.TimeoutError):
            again.extend(ns)
            continue
        for n, reply in zip(ns, replies, strict=True):
            if isinstance(reply, (*_REDIRECTS, NoScriptError)):
                again.append(n)
            else:
                out[n] = reply
    for n in sorted(again):
        out[n] = _run_again(client, commands[n], sources)
    return out


def _is_evalsha(command: Command) -> bool:
    return str(command[0][0]).upper() == "EVALSHA"


def _run_again(client: RedisCluster, command: Command, sources: dict[str, str]) -> Any:
    """One command through the cluster client (its redirects and retries), a script it
    says ``NOSCRIPT`` for loaded and the command run once more; an error as its exception."""
    args, options = command
    try:
        try:
            return client.execute_command(*args, **options)
        except NoScriptError:
            if not _is_evalsha(command):
                raise
            client.script_load(sources[args[1]])
            return client.execute_command(*args, **options)
    except redis.ResponseError as exc:
        return exc


def raise_first(replies: list[Any]) -> list[Any]:
    """``replies``, or the first error among them raised, as a pipeline's ``execute()``."""
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


def run_per_node(
    client: RedisCluster, calls: list[tuple[Any, ...]], sources: dict[str, str]
) -> list[Any]:
    """Independent ``("EVALSHA", sha, numkeys, *keys, *args)`` calls, each on one slot, as
    :func:`run_commands` sends them: one pipeline per node, not a round trip per call. The
    raw replies in the calls' order; the first error raised."""
    return raise_first(run_commands(client, [(call, {}) for call in calls], sources))


def next_wait(wait: float, heard: bool) -> float:
    """The wait before a cluster watch's next read, after one that waited ``wait``: half
    as long (not below :data:`POLL_S`) after a read that heard something, twice (not past
    :data:`POLL_MAX_S`) after one that did not. A watch that hears now and then settles
    near that interval: started again at :data:`POLL_S` after each hit, a coordinator of
    100 lanes hearing one every quarter second read 1,500 streams a second."""
    return max(POLL_S, wait / 2) if heard else min(wait * 2, POLL_MAX_S)


class Poll:
    """A cluster watch's wait between reads, kept from one :func:`read_streams` call to the
    next (:func:`next_wait`)."""

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

    A standalone server answers a blocking ``XREAD`` (a wait past
    :data:`~bus.store.block_chunks.BLOCK_CHUNK_S` is several). On a cluster each stream sits in
    its own slot, so each is read without blocking, pipelined per node, and the read is
    repeated until something arrives, ``block_ms`` passes or ``stop``: after :data:`POLL_S`,
    then each wait doubled up to :data:`POLL_MAX_S`, and after a read that heard, half the
    last (:func:`next_wait`). With ``poll`` the wait goes on from the last call's (a call
    whose wait is past :data:`POLL_S` waits before its first read, which would repeat the
    last call's final one).
    """
    if not is_cluster(client):
        from .block_chunks import blocks

        for block in blocks(block_ms / 1000):  # blocks the client's read timeout outlasts
            reply = client.xread(positions, count=count, block=max(1, int(block * 1000)))
            if isinstance(reply, dict):  # RESP3 answers a dict key -> entries
                reply = [(k, v[0] if v and isinstance(v[0], list) else v) for k, v in reply.items()]
            if reply or stop.is_set():
                return [(str(k), entries) for k, entries in reply or []]
        return []
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
                poll.wait = next_wait(poll.wait, heard=True)
                return [(str(k), [(str(i), f) for i, f in e]) for k, e in rows]
        if waited * 1000 >= block_ms or stop.is_set():
            return []
        wait = min(poll.wait, max(0.001, block_ms / 1000 - waited))
        stop.wait(wait)
        waited += wait
        poll.wait = next_wait(poll.wait, heard=False)
