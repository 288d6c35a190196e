"""The store's kick list: delivery kicks for a host's delivery loops (bus/delivery/kick_list.py).

A part of the store's ``delivery`` aggregate (:class:`bus.store.store.Delivery`). The list and the loops'
liveness key share the host's slot ``{kick:<host>}``.
"""

from __future__ import annotations

from typing import Any

from .base import StorePart
from .many import pack_commands, read_replies

# A kick list this long takes no more kicks (its loops are stuck or gone): they go to
# Celery, and the scheduler's sweep covers whatever the list holds.
KICK_CAP = 10_000


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class SentWait:
    """Commands written on a kick loop's own connection, ending in its wait for the next
    kick: their replies are read later (:meth:`read`), the connection kept until then."""

    def __init__(self, conn: Any, pool: Any, count: int, head: int, calls: int) -> None:
        self._conn, self._pool = conn, pool
        self._count, self._head, self._calls = count, head, calls

    def read(self) -> tuple[list[str], int, list[Any]]:
        """``([sid], waiting, replies)`` as :meth:`KickStore.wait_kick`, with the replies
        of the calls sent in front of the wait (raw, an error reply as its exception).
        Blocks until the wait ends (at most its block)."""
        try:
            replies = read_replies(self._conn, self._count)
        except BaseException:
            self._conn.disconnect()
            raise
        finally:
            self._pool.release(self._conn)
        first, waiting = replies[-2:]
        for reply in (first, waiting):
            if isinstance(reply, Exception):
                raise reply
        mine = replies[self._head : self._head + self._calls]
        return ([], 0, mine) if first is None else ([_text(first)], int(waiting), mine)


class KickStore(StorePart):
    """Push, pop and liveness of a host's kick list."""

    def push_kicks(self, host: str, sids: list[str]) -> bool:
        """Put ``sids`` on ``host``'s kick list when a delivery loop of it is alive
        (``kick_push.lua``, one round trip); False when none is (or the list is full)."""
        keys = [self.k.kick_list(host), self.k.kick_alive(host)]
        return bool(self.script("kick_push")(keys=keys, args=[KICK_CAP, *sids]))

    def kick_alive(self, host: str, ttl_ms: int) -> None:
        """A delivery loop of ``host`` is running (for ``ttl_ms``)."""
        self.r.set(self.k.kick_alive(host), "1", px=ttl_ms)

    def kick_client(self, block_s: float, name: str) -> tuple[Any, Any]:
        """``(client, pool)``: a connection of its own whose socket outlasts a ``block_s``
        pop; the caller disconnects ``pool`` (on a cluster, a cluster client of its own)."""
        from .blocking import outlasting, own_client

        return own_client(self.r, socket_timeout=outlasting(self.r, block_s), name=name)

    def take_kicks(self, host: str, loop: str, count: int, *, clear: bool = False) -> list[str]:
        """Up to ``count`` kicks already waiting on ``host``'s list into loop ``loop``'s
        taken list (``kick_take.lua``), without blocking; ``[]`` when none waits.
        ``clear``: the taken list (kicks the loop delivered) is emptied first, in the same
        call (as :meth:`done_kicks`)."""
        k = self.k
        got = self.script("kick_take")(
            keys=[k.kick_list(host), k.kick_taken(host, loop)], args=[count, "1" if clear else ""]
        )
        return [_text(r) for r in got or []]

    def wait_kick(
        self, client: Any, host: str, loop: str, block_s: float, *, clear: bool = False
    ) -> tuple[list[str], int]:
        """The next kick on ``host``'s list into loop ``loop``'s taken list, waited for up
        to ``block_s`` on ``client`` (BLMOVE), and how many more wait behind it (LLEN), in
        one round trip: ``([sid], waiting)``, or ``([], 0)`` when none came. ``clear``: the
        taken list (kicks the loop delivered) is emptied first, in the same round trip."""
        k = self.k
        taken = k.kick_taken(host, loop)
        pipe = client.pipeline(transaction=False)
        if clear:
            pipe.delete(taken)
        pipe.blmove(k.kick_list(host), taken, block_s, "LEFT", "RIGHT")
        pipe.llen(k.kick_list(host))
        first, waiting = pipe.execute()[-2:]
        return ([], 0) if first is None else ([_text(first)], int(waiting))

    def send_then_wait(
        self,
        client: Any,
        host: str,
        loop: str,
        block_s: float,
        calls: list[tuple[Any, ...]],
        *,
        load: bool,
    ) -> SentWait:
        """Write ``calls`` (script calls and commands, as
        :meth:`~bus.store.many.RoundTrips.run_in_order` takes them: a lone delivery's
        notice records) and then :meth:`wait_kick`'s commands (the taken list emptied
        first) on ``client``'s one connection, without waiting for a reply: Redis runs
        the calls as soon as the write arrives, then waits for the next kick. The
        replies are read by the returned :class:`SentWait`; ``client`` is not used
        until then. ``load``: the calls' scripts loaded at the head (a connection that
        already ran them skips that). Standalone servers only."""
        k = self.k
        taken, kicks = k.kick_taken(host, loop), k.kick_list(host)
        shas = list(dict.fromkeys(c[1] for c in calls if c[0] == "EVALSHA")) if load else []
        commands: list[tuple[Any, ...]] = [
            ("SCRIPT", "LOAD", self.io.script_source(sha)) for sha in shas
        ]
        commands += calls
        commands += [("DEL", taken), ("BLMOVE", kicks, taken, "LEFT", "RIGHT", block_s)]
        commands.append(("LLEN", kicks))
        pool = client.connection_pool
        conn = pool.get_connection()
        try:
            conn.send_packed_command([pack_commands(commands)])
        except BaseException:
            conn.disconnect()
            pool.release(conn)
            raise
        return SentWait(conn, pool, len(commands), len(shas), len(calls))

    def done_kicks(self, host: str, loop: str) -> None:
        """Loop ``loop``'s taken kicks were delivered: its taken list goes."""
        self.delete_one(self.k.kick_taken(host, loop))

    def kick_beat(self, host: str, loop: str, ttl_ms: int) -> None:
        """Loop ``loop`` of ``host`` is running: the host's alive key (for ``ttl_ms``) and
        the loop's beat, one round trip (``kick_beat.lua``)."""
        k = self.k
        self.script("kick_beat")(keys=[k.kick_alive(host), k.kick_loops(host)], args=[loop, ttl_ms])

    def kick_gone(self, host: str, loop: str) -> None:
        """Loop ``loop`` stopped (its taken list empty): its beat goes."""
        self.r.hdel(self.k.kick_loops(host), loop)

    def reclaim_kicks(self, host: str, stale_ms: int) -> int:
        """Put the taken kicks of ``host``'s dead loops (no beat for ``stale_ms``) back on
        its list (``kick_reclaim.lua`` each, which checks the beat again); how many."""
        k = self.k
        # Two round trips, once a second a process: a cluster's pipeline refuses TIME (a
        # command of no key), which stopped the reclaim there.
        beats = self.r.hgetall(k.kick_loops(host))
        now = self.server_time_ms()
        moved = 0
        for loop, beat in beats.items():
            loop = _text(loop)
            if now - int(beat) <= stale_ms:
                continue
            keys = [k.kick_list(host), k.kick_loops(host), k.kick_taken(host, loop)]
            moved += max(0, int(self.script("kick_reclaim")(keys=keys, args=[loop, stale_ms])))
        return moved
