"""A drain's notice marks: the notices a drain took confirmed, or kept for later.

A drain (``Bus.drain``, the delivery's own look at the floor, and the drain's fast lane,
bus.lanes.drain) confirms the notices it took with ``floor_drained.lua`` (the one place
marks move ``new → noticed``). With Redis down the ids wait in ``marks.pending.jsonl`` in
the session's floor folder, and the next drain or delivery confirms them.
"""

from __future__ import annotations

import errno
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bus.core.lane_names import PENDING_MARKS

from .floor import Floor
from .floor_lines import append_private


def pending_ids(path: Path) -> list[str]:
    """Notice ids a drain took while Redis was down (one JSON object a line)."""
    if not path.exists():
        return []
    ids = []
    for line in path.read_text().splitlines():
        try:
            ids.append(str(json.loads(line)["id"]))
        except (ValueError, KeyError, TypeError):
            continue  # a torn last line: that mark is lost, the notice was still drained
    return ids


# Why a socket to Redis failed, by errno, in a user's words.
_OUTAGE_ERRNO = {
    errno.ENOENT: "no server socket there",
    errno.ECONNREFUSED: "connection refused",
    errno.ECONNRESET: "connection reset",
    errno.EPIPE: "connection closed",
    errno.ETIMEDOUT: "no answer in time",
    errno.EHOSTUNREACH: "host unreachable",
    errno.ENETUNREACH: "network unreachable",
}


def outage_words(exc: BaseException) -> str:
    """What kept Redis from taking a drain's marks, in words (never ``[Errno 2] ...``)."""
    if isinstance(exc, TimeoutError):
        return "Redis did not answer (no answer in time)"
    if isinstance(exc, OSError) and exc.errno in _OUTAGE_ERRNO:
        return f"Redis did not answer ({_OUTAGE_ERRNO[exc.errno]})"
    if isinstance(exc, OSError) and exc.strerror:
        return f"Redis did not answer ({exc.strerror.lower()})"
    # The library's path (redis-py's errors, the store's own): redis-py is loaded already.
    if type(exc).__module__.startswith(("redis", "bus.store")):
        from bus.store.redis_errors import down_message

        return down_message(exc)[0]
    return f"Redis did not answer ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"


def notice_ids(lines: list[dict[str, Any]]) -> list[str]:
    """The ids of the notices among a drain's lines."""
    return [str(ln["id"]) for ln in lines if ln.get("kind") == "notice" and ln.get("id")]


def record_drained(
    floor: Floor,
    sid: str,
    nids: list[str],
    mark: Callable[[list[str]], object],
    words: Callable[[BaseException], str] = outage_words,
) -> None:
    """Confirm the notices a drain took (and any it deferred): ``mark(ids)`` runs
    ``floor_drained.lua``. If that fails (Redis down), remember them for later and say so
    on stderr (``words`` says what failed)."""
    pending_path = floor.session_dir(sid) / PENDING_MARKS
    waiting = pending_ids(pending_path)
    try:
        if waiting or nids:
            mark([*waiting, *nids])
        pending_path.unlink(missing_ok=True)
    except Exception as exc:  # Redis down: the drain still works; marks catch up later
        fresh = [n for n in nids if n not in waiting]
        if fresh:
            floor.session_dir(sid, create=True)
            append_private(
                pending_path, "".join(json.dumps({"id": n}) + "\n" for n in fresh).encode()
            )
        kept = len(waiting) + len(fresh)
        sys.stderr.write(
            f"inbox: drain of {sid} done; {words(exc)}, so {kept} notice mark(s) "
            f"wait in {PENDING_MARKS} for the next drain or delivery\n"
        )


__all__ = ["PENDING_MARKS", "notice_ids", "outage_words", "pending_ids", "record_drained"]
