"""Short streams rewritten to the memory their entries need (issue 13, memory).

Redis 7 allocates each new stream node at ``stream-node-max-bytes`` (4096 by default)
however short its entries, so a quiet session's ``events`` and a one-message thread's
``log`` take ~4.7 KB each on a default server. Once a minute (claimed in Redis, as the
receipts' expiry pass is) the scheduler rewrites each such stream of at most
:data:`MAX_ENTRIES` entries whose memory exceeds its entries' bytes by more than
:data:`SLACK_BYTES` plus :data:`NODE_BYTES` a node (``stream_compact.lua``: DUMP + RESTORE REPLACE in one script, the
same entries, last id and TTL in nodes sized to fit). A stream already compact, or
long (its nodes then full but the last), is left alone. A server that refuses DUMP,
RESTORE or MEMORY (some managed services) turns the pass off for the process, once logged.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import redis

if TYPE_CHECKING:
    from .store import Store

log = logging.getLogger(__name__)

COMPACT_EVERY_S = 60.0
MAX_ENTRIES = 64
SLACK_BYTES = 500
NODE_BYTES = 400
CHUNK = 500  # sessions per round trip

_refused = False


def compact_all(store: Store, *, force: bool = False) -> int:
    """Compact every session's short streams; the bytes saved (MEMORY USAGE). At most
    once a minute across every process unless ``force``."""
    global _refused
    if _refused:
        return 0
    if not force and not store.claim_sweep(int(COMPACT_EVERY_S * 1000), what="compact"):
        return 0
    sids = store.session_ids()
    saved = 0
    try:
        for at in range(0, len(sids), CHUNK):
            keys = store.session_streams(sids[at : at + CHUNK])
            saved += store.compact_streams(keys, MAX_ENTRIES, SLACK_BYTES, NODE_BYTES)
    except redis.ResponseError as exc:
        _refused = True
        log.warning("stream compaction off: the server refused it (%s)", exc)
    return saved
