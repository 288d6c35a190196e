"""Which session a message id was appended to, for 7 days: receipts and replies look it up.

The ids stored on one UTC day are fields of :data:`BUCKETS` hashes
(``P:{rc:<b>}:rcpt:<day>``, the bucket from the id's CRC32, so the hashes spread over a
cluster's slots, a bucket's days in one slot); a batch writes one HSET per bucket it
touches, and each hash expires a day after the retention of its last day. A lookup reads
the id's bucket of each day in the retention, newest first: one pipeline, and on a
cluster one node. 16 buckets keep a batch of a few hundred messages to a few HSETs
(docs/decisions).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

from .keys import DAY_MS, IDS_KEEP_DAYS, Keys

# Not ``typing.TYPE_CHECKING``: importing typing alone costs the read lane several ms
# (bus.lanes.read imports this module).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

BUCKETS = 16
# A day's hashes live until the retention of their last id has passed.
BUCKET_TTL_S = (IDS_KEEP_DAYS + 1) * 86400


def bucket_of(msg_id: str) -> int:
    """The id's bucket, the same in every process (CRC32, not Python's salted hash)."""
    return zlib.crc32(msg_id.encode("utf-8", "surrogatepass")) % BUCKETS


def day_of(now_ms: int) -> int:
    return now_ms // DAY_MS


def index(pipe: Any, k: Keys, pairs: Iterable[tuple[str, str]], now_ms: int) -> int:
    """Queue on ``pipe`` the writes recording each ``(message id, session)``: one HSET and
    one EXPIRE per bucket touched; answers how many commands were queued. Idempotent (a
    resend writes the same field again)."""
    day = day_of(now_ms)
    by_bucket: dict[int, dict[str, str]] = {}
    for msg_id, sid in pairs:
        by_bucket.setdefault(bucket_of(msg_id), {})[msg_id] = sid
    for b, mapping in by_bucket.items():
        key = k.rcpt_bucket(day, b)
        pipe.hset(key, mapping=mapping)
        pipe.expire(key, BUCKET_TTL_S)
    return 2 * len(by_bucket)


def unindex(r: Any, k: Keys, msg_id: str, now_ms: int) -> None:
    """Forget an id just indexed (its append was refused); ``r`` may be a pipeline."""
    r.hdel(k.rcpt_bucket(day_of(now_ms), bucket_of(msg_id)), msg_id)


def lookup(r: Any, k: Keys, msg_id: str, now_ms: int) -> str | None:
    """The session ``msg_id`` was appended to within the retention; ``None`` if unknown."""
    day, b = day_of(now_ms), bucket_of(msg_id)
    pipe = r.pipeline()
    for back in range(IDS_KEEP_DAYS + 1):
        pipe.hget(k.rcpt_bucket(day - back, b), msg_id)
    for found in pipe.execute():
        if found:
            return str(found)
    return None


def lookup_many(r: Any, k: Keys, msg_ids: Iterable[str], now_ms: int) -> dict[str, str]:
    """The session each of ``msg_ids`` was appended to, for those indexed within the
    retention: one pipeline of one HMGET per bucket and day the ids fall in (at most
    :data:`BUCKETS` times the days kept, however many ids), newest day first."""
    by_bucket: dict[int, list[str]] = {}
    for msg_id in dict.fromkeys(msg_ids):
        by_bucket.setdefault(bucket_of(msg_id), []).append(msg_id)
    if not by_bucket:
        return {}
    day = day_of(now_ms)
    pipe = r.pipeline()
    asked: list[list[str]] = []
    for back in range(IDS_KEEP_DAYS + 1):
        for b, ids in by_bucket.items():
            pipe.hmget(k.rcpt_bucket(day - back, b), ids)
            asked.append(ids)
    found: dict[str, str] = {}
    for ids, values in zip(asked, pipe.execute(), strict=True):
        for msg_id, sid in zip(ids, values, strict=True):
            if sid and msg_id not in found:
                found[msg_id] = str(sid)
    return found


def move_day_first(r: Any, k: Keys, now_ms: int) -> int:
    """Move the buckets named with a slot per day (``P:{rc:<day>:<b>}:rcpt``, as earlier
    versions wrote them) to :meth:`~bus.store.keys.Keys.rcpt_bucket`'s names, keeping
    their expiry; then mark it done (``P:rcpt:moved``). Idempotent; answers how many
    buckets were moved. Their names are known (the days kept, the 16 buckets), so no
    key is scanned for."""
    day = day_of(now_ms)
    olds = [
        (k.rcpt_bucket_day_first(day - back, b), k.rcpt_bucket(day - back, b))
        for back in range(IDS_KEEP_DAYS + 2)
        for b in range(BUCKETS)
    ]
    pipe = r.pipeline()
    pipe.exists(k.rcpt_moved)
    for old, _new in olds:
        pipe.hgetall(old)
        pipe.ttl(old)
    done, *got = pipe.execute()
    if done:
        return 0
    moved = 0
    pipe = r.pipeline()
    for n, (old, new) in enumerate(olds):
        fields, ttl = got[2 * n], got[2 * n + 1]
        if fields:
            pipe.hset(new, mapping=fields)
            pipe.expire(new, ttl if ttl and int(ttl) > 0 else BUCKET_TTL_S)
            pipe.delete(old)
            moved += 1
    pipe.set(k.rcpt_moved, "1")
    pipe.execute()
    return moved
