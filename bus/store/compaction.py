"""Short streams rewritten to the memory their entries need.

Redis 7 allocates each new stream node at ``stream-node-max-bytes`` (4096 by default)
however short its entries, so a quiet session's ``events`` and a one-message thread's
``log`` take a whole node each on a default server. Every 30 s (claimed in Redis, as the
receipts' expiry pass is; a few :data:`CHUNK` sessions a tick) the scheduler rewrites each such stream of at most
:data:`MAX_ENTRIES` entries whose memory exceeds its entries' bytes by more than
:data:`SLACK_BYTES` plus :data:`NODE_BYTES` a node (``stream_compact.lua``: DUMP + RESTORE REPLACE in one script, the
same entries, last id and TTL in nodes sized to fit). A stream already compact,
long (its nodes then full but the last), or written in the last :data:`SETTLED_MS`, is
left alone; a thread's log is not looked at once a completed pass found it settled
(:func:`threads_floor`), so an idle registry's passes cost per session, not per thread. A server that refuses DUMP,
RESTORE or MEMORY (some managed services) turns the pass off for the process, once logged.

The same pass drops the ``events`` of a session quiet for ``INBOX_EVENTS_KEEP_S``
(:data:`QUIET_MS` by default)
(``events_quiet.lua``): an audit trail an idle session would otherwise keep for good;
and a queue the delivery took whole with its cursor (``queue_trim.lua``, which the
delivery runs too, keeps them when it ran within the cursor's millisecond).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import redis

from .stream_compact import SUB_IDLE_MS

if TYPE_CHECKING:
    from .store import Store

log = logging.getLogger(__name__)

COMPACT_EVERY_S = 30.0
MAX_ENTRIES = 64
SLACK_BYTES = 500
NODE_BYTES = 400
# Sessions per round trip. A tick goes on to the next chunk only within BUDGET_S, so the
# pass never holds up a tick's due wakes.
CHUNK = 50
BUDGET_S = 0.01
# A pass's ticks at most this often: the scheduler ticks every few ms while a burst of
# wakes falls due, and a pass's chunk a tick then took a core's share from those wakes.
GAP_S = 0.5
# A session's events stream is dropped once its newest record is this old (the default
# of INBOX_EVENTS_KEEP_S): nothing replays it, and a live reader (a --wait, a
# withdrawal) only waits for newer records. An idle session's events stream, the most of its
# memory, is then gone within a minute of its turn's end.
QUIET_MS = 30 * 1000
# A stream whose newest entry is younger than this is left for a later pass: still being
# written, it would take a fresh node at its next entry and be compacted again.
SETTLED_MS = 20 * 1000

# A thread's log is looked at again only while it may be unsettled: once a pass that
# started SETTLED_MS after the thread's newest message completed, the log was compacted
# (or found compact) and stays so until written again, which moves that time. Margin for
# the clocks of the hosts that write those times.
SKEW_MS = 60 * 1000
# Every this many passes a process looks at every thread's log again (one written with
# its newest time unmoved is compacted by the next such pass).
FULL_EVERY = 10

_refused = False
_left: dict[str, list[str]] = {}  # key prefix -> sessions this process's pass has left
_next: dict[str, float] = {}  # key prefix -> when its pass may go on (time.monotonic)
_started: dict[str, int] = {}  # key prefix -> when this process's pass started (ms)
_done_from: dict[str, int] = {}  # key prefix -> when its last completed pass started (ms)
_passes: dict[str, int] = {}  # key prefix -> passes this process started
_threads_from: dict[str, int] = {}  # key prefix -> the pass's oldest thread looked at (ms)


def compact_sessions(
    store: Store,
    sids: list[str],
    quiet_ms: int,
    settled_ms: int = 0,
    sub_idle_ms: int = SUB_IDLE_MS,
    threads_from: int = 0,
) -> int:
    """One pass over ``sids``: events quiet for ``quiet_ms`` (and used by no durable
    subscription within ``sub_idle_ms``) dropped, queues taken whole dropped with their
    cursors, short streams written ``settled_ms`` ago or earlier compacted (the logs of
    threads whose newest message is ``threads_from`` ms or later); the bytes saved
    (MEMORY USAGE, the queues' not counted)."""
    saved = store.events.drop_quiet_events(sids, quiet_ms, sub_idle_ms)
    store.events.drop_taken_queues(sids)
    keys = store.events.session_streams(sids, threads_from)
    return saved + store.events.compact_streams(
        keys, MAX_ENTRIES, SLACK_BYTES, NODE_BYTES, settled_ms
    )


def compact_all(
    store: Store,
    *,
    force: bool = False,
    quiet_ms: int = QUIET_MS,
    sub_idle_ms: int = SUB_IDLE_MS,
) -> int:
    """Compact the sessions' short streams; the bytes saved (MEMORY USAGE).

    A pass starts at most every COMPACT_EVERY_S across every process and goes :data:`CHUNK`
    sessions a round trip, as many chunks a call (one scheduler tick) as fit in
    :data:`BUDGET_S` (one at least), a tick every :data:`GAP_S` at most, so a large
    registry never holds up a tick's wakes; ``force`` does every session now, its streams
    written moments ago too (the pass leaves those for :data:`SETTLED_MS`). Events quiet
    for ``quiet_ms`` are dropped unless a durable subscription used them within
    ``sub_idle_ms``."""
    global _refused
    if _refused:
        return 0
    prefix = store.k.prefix
    if not force and time.monotonic() < _next.get(prefix, 0.0):
        return 0
    left = _left.get(prefix) or []
    if force:
        left = store.sessions.session_ids()
        _start_pass(prefix, full=True)
    elif not left:
        if not store.schedule.claim_sweep(int(COMPACT_EVERY_S * 1000), what="compact"):
            return 0
        left = store.sessions.session_ids()
        _start_pass(prefix)
    saved = 0
    started = time.monotonic()
    try:
        while left:
            chunk, left = left[:CHUNK], left[CHUNK:]
            saved += compact_sessions(
                store,
                chunk,
                quiet_ms,
                0 if force else SETTLED_MS,
                sub_idle_ms,
                _threads_from.get(prefix, 0),
            )
            if not force and time.monotonic() - started >= BUDGET_S:
                break
    except redis.ResponseError as exc:
        _refused = True
        left = []
        log.warning("stream compaction off: the server refused it (%s)", exc)
    if not left and prefix in _started:
        _done_from[prefix] = _started.pop(prefix)
    _left[prefix] = left
    _next[prefix] = time.monotonic() + GAP_S
    return saved


def _start_pass(prefix: str, *, full: bool = False) -> None:
    """A new pass: which threads' logs it looks at (:func:`threads_floor`)."""
    n = _passes[prefix] = _passes.get(prefix, 0) + 1
    _started[prefix] = int(time.time() * 1000)
    _threads_from[prefix] = threads_floor(_done_from.get(prefix), n, full=full)


def threads_floor(done_from: int | None, n: int, *, full: bool = False) -> int:
    """The oldest newest-message time (ms) of a thread whose log pass ``n`` looks at:
    every thread (0) on a forced pass, a process's first, and every
    :data:`FULL_EVERY`-th; else those a pass that started at ``done_from`` (the last one
    completed) may have found unsettled, with :data:`SKEW_MS` for the hosts' clocks."""
    if full or done_from is None or n % FULL_EVERY == 0:
        return 0
    return max(0, done_from - SETTLED_MS - SKEW_MS)
