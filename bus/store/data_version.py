"""The version of the data a store keeps, and the one lock its upgrade is made under.

``P:data`` (bus.store.keys) says which data version the store's keys are in: each change
to what the store keeps raises :data:`DATA_VERSION` and comes with a migration
(bus.ops.upgrade). A store with no ``P:data`` was written by 0.1.0 (data version 1), or
is new. A host whose :data:`DATA_VERSION` is below the store's refuses to start
(:func:`too_new`); a newer host reads older data and upgrades it.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import redis

from .redis_errors import NOT_ANSWERING, unavailable

if TYPE_CHECKING:
    from .store import Store

# The data version this code reads and writes.
DATA_VERSION = 2
# The release that first wrote each data version: what an older host is told it needs.
RELEASE_OF = {1: "0.1.0", 2: "0.2.0"}
# The version of a store with keys and no ``P:data`` (0.1.0 kept none).
UNVERSIONED = 1
LOCK_TTL_MS = 60_000
# A server that does not answer yet, or answers that it is loading its data.
_STARTING: tuple[type[Exception], ...] = (*NOT_ANSWERING, redis.BusyLoadingError)


def answers(store: Store) -> bool:
    """Whether the store's server answers (not still starting or loading its data)."""
    try:
        store.r.ping()
    except _STARTING:
        return False
    return True


def wait_answering(store: Store, timeout_s: float, stop: threading.Event | None = None) -> None:
    """Return once the store's server answers (a server just started may still be
    starting or loading its data); ``Unavailable`` past ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            store.r.ping()
            return
        except _STARTING as exc:
            if time.monotonic() >= deadline or (stop is not None and stop.is_set()):
                raise unavailable(exc) from exc
        time.sleep(0.05)


def close(store: Store) -> None:
    """Close the store's connections (a store opened for the upgrade alone)."""
    store.r.close()


def read(store: Store) -> dict[str, str]:
    """``P:data``'s fields (version, release, at, by); empty when the store keeps none."""
    return {str(k): str(v) for k, v in store.r.hgetall(store.k.data).items()}


def version_of(fields: dict[str, str]) -> int | None:
    """The data version ``P:data`` names (``None``: none kept)."""
    raw = fields.get("version", "")
    return int(raw) if raw.isdigit() else None


def too_new(stored: int | None, ours: int = DATA_VERSION) -> bool:
    """Whether data of version ``stored`` is newer than this code reads (pure)."""
    return stored is not None and stored > ours


def needed_release(fields: dict[str, str]) -> str:
    """The release a host needs to read the store's data: the one that wrote it."""
    version = version_of(fields)
    return fields.get("release") or RELEASE_OF.get(version or 0, f"data version {version}")


def is_new(store: Store) -> bool:
    """A store no session was ever opened in, no member added, no subscription made:
    nothing to upgrade."""
    if store.r.zcard(store.k.sessions) or store.r.exists(store.k.member_folds):
        return False
    return not any(True for _ in scan(store, store.k.sub_pattern()))


def stamp(store: Store, version: int, release: str, host: str, at_ms: int) -> None:
    """Record that the store's data is in ``version`` now."""
    store.r.hset(
        store.k.data, mapping={"version": version, "release": release, "at": at_ms, "by": host}
    )


def take_lock(store: Store, ttl_ms: int = LOCK_TTL_MS) -> str | None:
    """The upgrade's lock for ``ttl_ms``: a token, or ``None`` while another host holds it."""
    token = secrets.token_hex(8)
    return token if store.r.set(store.k.data_lock, token, nx=True, px=ttl_ms) else None


def renew_lock(store: Store, token: str, ttl_ms: int = LOCK_TTL_MS) -> bool:
    """Keep holding the lock; False when it was lost (expired, taken by another)."""
    lock = store.k.data_lock
    # extend_lock.lua's second key (a hand-off flag beside a session's lock) is the lock
    # itself here: one key, one slot.
    return bool(store.script("extend_lock")(keys=[lock, lock], args=[token, ttl_ms]))


def release_lock(store: Store, token: str) -> None:
    """Free the lock if ``token`` still holds it."""
    store.script("unlock")(keys=[store.k.data_lock], args=[token])


def scan(store: Store, pattern: str, count: int = 500) -> Iterator[str]:
    """The keys matching ``pattern`` (every node of a cluster)."""
    for key in store.r.scan_iter(match=pattern, count=count):
        yield str(key)


def session_ids(store: Store, batch: int = 1000) -> Iterator[list[str]]:
    """Every registered session id, ``batch`` at a time."""
    start = 0
    while True:
        sids = [str(s) for s in store.r.zrange(store.k.sessions, start, start + batch - 1)]
        if not sids:
            return
        yield sids
        start += batch


__all__ = [
    "DATA_VERSION",
    "RELEASE_OF",
    "UNVERSIONED",
    "answers",
    "close",
    "is_new",
    "needed_release",
    "read",
    "release_lock",
    "renew_lock",
    "scan",
    "session_ids",
    "stamp",
    "take_lock",
    "too_new",
    "version_of",
    "wait_answering",
]
