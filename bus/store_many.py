"""The store's batched side: reads and writes over many sessions or threads in one round
trip, for the scheduler's dispatch and a batch send's checks.

A mixin of :class:`~bus.store.Store` like :mod:`bus.store_inbox`; the same contract: each
answers in its callers' order, one round trip per node, and a missing thing reads empty.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from redis.exceptions import NoScriptError

from . import rcptindex


class ManyStore:
    """Several sessions' or threads' keys at once."""

    r: Any
    k: Any
    lock_ttl_ms: int
    cluster: bool
    _sources: dict[str, str]

    def script(self, name: str) -> Any:  # the registered Lua script; Store defines it
        raise NotImplementedError

    def session_hosts(self, sids: list[str]) -> list[str | None]:
        """Each session's host, in order; ``None`` for a session that does not exist."""
        pipe = self.r.pipeline(transaction=False)
        for sid in sids:
            pipe.hget(self.k.s(sid, "session"), "host")
        return list(pipe.execute())

    def flag_dispatched(self, sids: Iterable[str]) -> None:
        """Set each session's dispatch flag (``pending``, for the lock TTL) in one round trip,
        whether or not it was set: the caller is sending the delivery now."""
        pipe = self.r.pipeline(transaction=False)
        for sid in sids:
            pipe.set(self.k.s(sid, "pending"), "1", px=self.lock_ttl_ms)
        pipe.execute()

    def thread_parties_many(self, threads: list[str]) -> list[tuple[Any, bool]]:
        """Each named thread's raw ``parties`` field (``None`` if unset) and whether the
        thread exists, in order."""
        pipe = self.r.pipeline(transaction=False)
        for thread in threads:
            meta = self.k.t(thread, "meta")
            pipe.hget(meta, "parties")
            pipe.exists(meta)
        got = pipe.execute()
        return [(got[2 * n], bool(got[2 * n + 1])) for n in range(len(threads))]

    def unindex_many(self, msg_ids: Iterable[str], now: int) -> None:
        """Forget the recipient index entries just written for ``msg_ids`` (their appends
        were refused), in one round trip."""
        pipe = self.r.pipeline(transaction=False)
        for msg_id in msg_ids:
            rcptindex.unindex(pipe, self.k, msg_id, now)
        pipe.execute()

    def queue_append_many(self, pipe: Any, sid: str, msg_ids: list[str], args: list[Any]) -> None:
        """Queue on ``pipe`` one ``append_many.lua`` call: ``sid``'s messages ``msg_ids``
        (``args`` as the script reads them), each stored message's receipt opened. A bare
        ``EVALSHA``: run the pipeline with :meth:`execute_loaded`."""
        names = ("stream", "ids", "idsage", "pending", "trim", "events", "msgs")
        keys = [self.k.s(sid, n) for n in names]
        keys.extend(self.k.receipts(sid, msg_ids))
        pipe.evalsha(self.script("append_many").sha, len(keys), *keys, *args)

    def execute_loaded(self, pipe: Any) -> list[Any]:
        """Run a pipeline holding bare ``EVALSHA`` calls (:meth:`queue_append_many`)
        without the ``SCRIPT EXISTS`` round trip redis-py sends before a pipeline that
        holds scripts: a call the server answers ``NOSCRIPT`` (it restarted, or its
        scripts were flushed) did not run; its script is loaded and it runs again. The
        replies in order; the first error raised, as ``execute()`` raises it."""
        if self.cluster:
            return list(pipe.execute())  # OrderedBatch loads a lost script itself
        stack = [args for args, _options in pipe.command_stack]
        replies = list(pipe.execute(raise_on_error=False))
        lost = [n for n, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
        if lost:
            for sha in {stack[n][1] for n in lost}:
                self.r.script_load(self._sources[sha])
            again = self.r.pipeline(transaction=False)
            for n in lost:
                again.execute_command(*stack[n])
            for n, reply in zip(lost, again.execute(raise_on_error=False), strict=True):
                replies[n] = reply
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return replies
