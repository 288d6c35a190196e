"""The store's plumbing for many calls in one round trip: bare ``EVALSHA`` tuples run per
node or in order, a loaded pipeline, commands packed onto one connection.

A part of :class:`~bus.store.core.StoreCore`, which every aggregate of the store reaches
through :class:`~bus.store.base.StorePart`; the calls answer in their callers' order, one
round trip per node.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from redis.exceptions import NoScriptError, ResponseError

from .base import StorePart
from .cluster import run_per_node

_hiredis_pack: Callable[[tuple[Any, ...]], bytes] | None
try:  # redis[hiredis] is a dependency; the Python packing stands in without it
    import hiredis

    _hiredis_pack = hiredis.pack_command
except ImportError:  # pragma: no cover
    _hiredis_pack = None

_TEXT = frozenset((str, int, float))


def read_replies(conn: Any, count: int) -> list[Any]:
    """The next ``count`` replies on ``conn``, raw, an error reply as its exception."""
    replies: list[Any] = []
    for _ in range(count):
        try:
            replies.append(conn.read_response())
        except ResponseError as exc:
            replies.append(exc)
    return replies


def pack_commands(commands: list[tuple[Any, ...]]) -> bytes:
    """``commands`` in the Redis protocol, as one buffer: the bytes redis-py's
    ``pack_command`` writes for ``str``, ``bytes`` and number arguments, at a fraction of
    its cost. hiredis packs each command in C (a lone delivery packs hundreds of
    arguments, packing that would otherwise be the kick loop's busiest Python work); an argument hiredis refuses (a
    ``bool``, another type redis-py writes as its repr) sends the commands through the
    Python packing below."""
    if _hiredis_pack is not None:
        try:
            return b"".join([_hiredis_pack(args) for args in commands])
        except TypeError:
            pass
    out: list[bytes] = []
    for args in commands:
        kinds = set(map(type, args))
        if kinds <= _TEXT:
            if len(kinds) > 1 or str not in kinds:  # numbers as redis-py writes them
                args = tuple(a if type(a) is str else repr(a) for a in args)
            out.append(_pack_text(args))
        else:  # bytes (or another type redis-py would write as its repr)
            out.append(_pack_bytes(args))
    return b"".join(out)


def _pack_text(args: tuple[str, ...]) -> bytes:
    """Text arguments sized by their characters and encoded at once (no per-argument
    checks: an append call has several arguments a message); sized by their bytes, argument
    by argument, only when the text is not all ASCII."""
    text = "".join([f"${len(a)}\r\n{a}\r\n" for a in args])
    data = text.encode()
    if len(data) != len(text):
        text = "".join([f"${len(a) if a.isascii() else len(a.encode())}\r\n{a}\r\n" for a in args])
        data = text.encode()
    return b"*%d\r\n%b" % (len(args), data)


def _pack_bytes(args: tuple[Any, ...]) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        if isinstance(arg, bytes):
            data = arg
        elif isinstance(arg, str):
            data = arg.encode()
        else:
            data = repr(arg).encode()
        out.append(b"$%d\r\n%b\r\n" % (len(data), data))
    return b"".join(out)


class SweepView(NamedTuple):
    """What the backlog sweep (bus.delivery.scheduler) reads of one session: queue entries past
    its cursor, the notice in flight's start (ms), whether messages are new, its due and
    retry times on the schedule, the floor's unconfirmed notice records (JSON)."""

    backlog: bool
    flight_at: int | None
    has_new: bool
    due_at: int | None
    retry_at: int | None
    floor_records: list[str]


def stream_id_after(last: str, cursor: str | None) -> bool:
    """Whether stream id ``last`` comes after ``cursor`` (``None``: none taken yet), as
    Redis orders them (``ms-seq``, each part a number)."""
    if not cursor:
        return True
    a, _, b = last.partition("-")
    c, _, d = cursor.partition("-")
    return (int(a), int(b or 0)) > (int(c), int(d or 0))


class RoundTrips(StorePart):
    """Script calls and commands for many keys, sent in one round trip."""

    _sources: dict[str, str]

    def script_call(self, name: str, keys: list[str], args: list[Any]) -> tuple[Any, ...]:
        """Script ``name`` on ``keys`` with ``args`` as a bare ``EVALSHA`` argument tuple,
        for :meth:`run_scripts`: a batch's hundreds of calls skip redis-py's command layer
        (its ``Script`` objects and pipeline queueing were a fifth of a due wake's Python)."""
        return ("EVALSHA", self.script(name).sha, len(keys), *keys, *args)

    def run_scripts(self, calls: list[tuple[Any, ...]]) -> list[Any]:
        """:meth:`script_call` tuples in one round trip, as :meth:`execute_loaded` runs a
        pipeline of them: raw replies in order, a call answered ``NOSCRIPT`` loaded and run
        again, the first error raised. On a cluster, one pipeline per node
        (:func:`bus.store.cluster.run_per_node`): the calls are independent."""
        if self.cluster:
            return run_per_node(self.r, calls, self._sources)
        return self._run_loaded(calls)

    def run_in_order(self, calls: list[tuple[Any, ...]]) -> list[Any]:
        """:meth:`script_call` tuples (and plain command tuples) in one round trip, in
        their order, their scripts loaded at its head in the same round trip, as a redis-py
        pipeline does (``inline_script_loads``), so no script runs out of order after a
        restart (as :meth:`run_scripts` would run it): raw replies, the first error raised.
        When the one script is the last call, it is loaded only if the server answers
        ``NOSCRIPT``. On a cluster, through its ordered batch."""
        if self.cluster:
            pipe = self.pipeline()
            for call in calls:
                if call[0] == "EVALSHA":
                    pipe.evalsha(*call[1:])
                else:
                    pipe.execute_command(*call)
            return list(pipe.execute())
        scripts = [n for n, call in enumerate(calls) if call[0] == "EVALSHA"]
        if scripts == [len(calls) - 1]:
            # One script, last: a NOSCRIPT means it alone did not run, after the rest in
            # order, so it is loaded and run then (no source sent on every call).
            return self._run_loaded(calls)
        shas = dict.fromkeys(call[1] for call in calls if call[0] == "EVALSHA")
        head = [("SCRIPT", "LOAD", self._sources[sha]) for sha in shas]
        replies = self.run_packed(head + calls)
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return replies[len(head) :]

    def execute_loaded(self, pipe: Any) -> list[Any]:
        """Run a pipeline holding bare ``EVALSHA`` calls (:meth:`~bus.store.ingest.IngestStore.queue_append_many`)
        without the ``SCRIPT EXISTS`` round trip redis-py sends before a pipeline that
        holds scripts: a call the server answers ``NOSCRIPT`` (it restarted, or its
        scripts were flushed) did not run; its script is loaded and it runs again. The
        replies in order, raw (no redis-py response callbacks: the callers read the
        scripts' replies); the first error raised, as ``execute()`` raises it."""
        if self.cluster:
            return list(pipe.execute())  # OrderedBatch loads a lost script itself
        stack = [args for args, _options in pipe.command_stack]
        pipe.reset()
        return self._run_loaded(stack)

    def _run_loaded(self, stack: list[tuple[Any, ...]]) -> list[Any]:
        return self.run_loaded_then(stack, None)[0]

    def run_loaded_then(
        self, stack: list[tuple[Any, ...]], tail: tuple[Any, ...] | None
    ) -> tuple[list[Any], list[Any]]:
        """:meth:`execute_loaded`'s run of ``stack``, with ``tail`` (a command that reads
        its connection's writes: ``WAITAOF``, ``WAIT``) sent last in the same round trip,
        and again after the calls a ``NOSCRIPT`` made run a second time: the replies, and
        each run's reply to ``tail`` (raw, an error reply as its exception)."""
        extra = [tail] if tail is not None else []
        replies = self.run_packed(stack + extra)
        tails = [replies.pop()] if extra else []
        lost = [n for n, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
        if lost:
            shas = list(dict.fromkeys(stack[n][1] for n in lost))
            again = [("SCRIPT", "LOAD", self._sources[sha]) for sha in shas]
            rerun = self.run_packed(again + [stack[n] for n in lost] + extra)
            if extra:
                tails.append(rerun.pop())
            for n, reply in zip(lost, rerun[len(shas) :], strict=True):
                replies[n] = reply
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return replies, tails

    def run_packed(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        """Send ``commands`` (argument tuples) in one round trip, packed by
        :func:`pack_commands`; the raw replies in order, an error reply as its exception.
        A connection error retries the whole batch as a redis-py pipeline does (its
        client's retry policy, the connection dropped in between): every command a batch
        send runs is idempotent. Standalone servers only (a cluster's pipelines route)."""
        if not commands:
            return []
        blob = pack_commands(commands)
        pool = self.r.connection_pool
        conn = pool.get_connection()

        def run() -> list[Any]:
            conn.send_packed_command([blob])
            return read_replies(conn, len(commands))

        try:
            return list(conn.retry.call_with_retry(run, lambda _error: conn.disconnect()))
        finally:
            pool.release(conn)
