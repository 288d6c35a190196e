"""A store that answers but refuses writes: which fault its error reply names, in words,
with the fix. Pure; bus.store.redis_errors turns such a reply into
:class:`~bus.core.errors.StoreRefused` (``store_refused``) on every surface, and
``inbox status`` / ``inbox doctor`` name the same faults from the server's INFO.
"""

from __future__ import annotations

# Not ``typing``: importing it alone costs the read lane several ms (it reports these).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class StoreFault:
    """A write-refusing fault: ``reason`` (disk | read_only | memory | replicas), ``words``
    (what the store refuses, and why), ``fix`` (what to do next)."""

    __slots__ = ("fix", "reason", "words")

    def __init__(self, reason: str, words: str, fix: str) -> None:
        self.reason, self.words, self.fix = reason, words, fix


# By the first word of the server's error reply.
_FAULTS: dict[str, StoreFault] = {
    "MISCONF": StoreFault(
        "disk",
        "the store refuses writes: it could not save to its disk (full, or not writable)",
        "free space on the store's disk (the embedded store's is $INBOX_HOME/redis); it "
        "takes writes again once a save succeeds (inbox doctor checks)",
    ),
    "READONLY": StoreFault(
        "read_only",
        "the store refuses writes: it is a read-only replica",
        "point INBOX_REDIS_URL at the primary (after a failover, the promoted one)",
    ),
    "OOM": StoreFault(
        "memory",
        "the store refuses writes: it is at its memory limit (maxmemory)",
        "raise the store's maxmemory or free memory (inbox doctor shows what it holds)",
    ),
    "NOREPLICAS": StoreFault(
        "replicas",
        "the store refuses writes: too few replicas are connected (min-replicas-to-write)",
        "bring a replica back, or lower min-replicas-to-write",
    ),
}


def fault_of(reply: str) -> StoreFault | None:
    """The write-refusing fault an error reply names (``MISCONF ...``, ``READONLY ...``,
    ``OOM ...``, ``NOREPLICAS ...``), or None for any other reply."""
    first = reply.strip().split(" ", 1)[0].upper()
    return _FAULTS.get(first)


def fault_of_info(info: dict[str, object], *, stop_writes: bool = True) -> StoreFault | None:
    """The write-refusing fault a server's INFO (its persistence, replication and memory
    sections) shows now, or None: a failed append-only write, a failed background save
    while ``stop-writes-on-bgsave-error`` is on (``stop_writes``; the server's default:
    it then refuses writes ``MISCONF``), a replica, a full memory that evicts nothing."""
    if str(info.get("aof_last_write_status", "ok")) != "ok":
        return _FAULTS["MISCONF"]
    if stop_writes and str(info.get("rdb_last_bgsave_status", "ok")) != "ok":
        return _FAULTS["MISCONF"]
    if info.get("role") == "slave":
        return _FAULTS["READONLY"]
    limit = _int(info.get("maxmemory"))
    if (
        limit > 0
        and _int(info.get("used_memory")) >= limit
        and str(info.get("maxmemory_policy", "noeviction")) == "noeviction"
    ):
        return _FAULTS["OOM"]
    return None


def with_storage(report: dict[str, Any], fault: StoreFault | None) -> dict[str, Any]:
    """``inbox status``'s answer with its ``storage`` entry: ``{"ok": true}``, or, when the
    store refuses writes, ``{"ok": false, "reason", "message", "fix"}`` and the answer's
    own ``ok`` false."""
    if fault is None:
        return {**report, "storage": {"ok": True}}
    entry = {"ok": False, "reason": fault.reason, "message": fault.words, "fix": fault.fix}
    return {**report, "ok": False, "storage": entry}


def _int(value: object) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0
