"""The drain lane's two writes: a drain's marks and a harness's ``last_seen``, without
redis-py.

A harness drains at every tool step; importing redis-py alone costs more than the rest of
the drain, so these two writes go over :mod:`bus.lanes.resp` (plain sockets). The scripts
are the library's own (``floor_drained.lua``, ``seen.lua``, their parts included,
bus.store.lua_files), on the keys of bus.store.keys. A URL the small client does not speak
(TLS, a cluster) answers :data:`UNSUPPORTED`: the caller takes the library's path.
"""

from __future__ import annotations

from typing import Any

from bus.store.keys import Keys
from bus.store.lua_files import lua_source

from . import resp

UNSUPPORTED = resp.UNSUPPORTED
# What this lane raises when Redis cannot take its write (besides OSError).
FAST_LANE_ERRORS: tuple[type[Exception], ...] = (OSError, ValueError, resp.RespError)
_DRAINED_KEYS = ("floor", "msgs", "carried", "events", "notice", "session")


def _run(url: str, script: str, keys: list[str], args: list[str | int]) -> Any:
    conn = resp.connect(url)
    if not isinstance(conn, resp.Connection):
        return UNSUPPORTED
    try:
        return resp.run_script(conn, lua_source(script), keys, args)
    finally:
        conn.close()


def confirm_drained(url: str, prefix: str, sid: str, nids: list[str], now: int) -> Any:
    """Confirm the notices ``nids`` a drain took (``floor_drained.lua``, as
    :meth:`bus.store.store.Store.inbox.confirm_notices` with ``via`` ``drain``): the script's
    reply, or :data:`UNSUPPORTED`. Raises OSError when the server does not answer."""
    k = Keys(prefix)
    return _run(url, "floor_drained", [k.s(sid, n) for n in _DRAINED_KEYS], [now, "drain", *nids])


def touch_seen(url: str, prefix: str, sid: str, now: int) -> bool:
    """The session's harness was seen at ``now`` (``seen.lua``); False for a URL this lane
    does not speak. Raises one of :data:`FAST_LANE_ERRORS` when Redis did not take it."""
    return _run(url, "seen", [Keys(prefix).s(sid, "session")], [now]) is not UNSUPPORTED


def is_refusal(exc: BaseException) -> bool:
    """Whether ``exc`` is the server's error reply (not a socket's failure)."""
    return isinstance(exc, resp.RespError)
