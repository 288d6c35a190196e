"""The drain's fast lane: take the floor and record the marks without the whole library.

A harness drains at every tool step; when something waits there, ``inbox drain SID`` and
the ``PostToolUse`` hook come here from bus.surfaces.entry. The floor is drained exactly as
:meth:`bus.api.Bus.drain` drains it (claim by rename, log, then unlink) and the notices
taken are confirmed by the same script (``floor_drained.lua``, the one place marks move
``new → noticed``), sent over the store's fast lane (bus.store.fast_lane) instead of
redis-py, whose import alone costs more than the rest. With Redis down the marks wait in ``marks.pending.jsonl`` for the next
drain or delivery, as they do on the library's path, which this module's
:func:`record_drained` also serves.
"""

from __future__ import annotations

import errno
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bus.core import faults
from bus.core.hook_env import load_hook_env
from bus.core.ids import check_session_id
from bus.core.settings import Settings

from .floor import Floor
from .floor_lines import append_private
from .floor_result import floor_sync, skipped_words

PENDING_MARKS = "marks.pending.jsonl"


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


# Why a socket to Redis failed, by errno, in a user's words (the fast lane has no redis-py).
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
    """What kept Redis from taking the drain's marks, in words (never ``[Errno 2] ...``)."""
    from bus.store.fast_lane import is_refusal

    if is_refusal(exc):
        return f"Redis refused ({exc})"
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
    return [str(ln["id"]) for ln in lines if ln.get("kind") == "notice" and ln.get("id")]


def record_drained(
    floor: Floor, sid: str, nids: list[str], mark: Callable[[list[str]], object]
) -> None:
    """Confirm the notices a drain took (and any it deferred): ``mark(ids)`` runs
    ``floor_drained.lua``. If that fails (Redis down), remember them for later."""
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
            f"inbox: drain of {sid} done; {outage_words(exc)}, so {kept} notice mark(s) "
            f"wait in {PENDING_MARKS} for the next drain or delivery\n"
        )


def _library_store(settings: Settings) -> Any:
    """The library's own store (redis-py): for what the fast lane does not speak."""
    from bus.store.connection import redis_client
    from bus.store.keys import Keys
    from bus.store.store import Store

    return Store(redis_client(settings), Keys(settings.key_prefix))


def _lane_errors(settings: Settings) -> tuple[type[BaseException], ...]:
    """What a drain's or a touch's write raises when Redis does not take it: the fast
    lane's, and on a cluster (the library's path) redis-py's."""
    from bus.store import fast_lane

    if not settings.redis_cluster:
        return fast_lane.FAST_LANE_ERRORS
    from bus.store.outage_log import OUTAGE_ERRORS

    return (*fast_lane.FAST_LANE_ERRORS, *OUTAGE_ERRORS)


def _mark_over_resp(settings: Settings, sid: str) -> Callable[[list[str]], object]:
    from bus.store import fast_lane

    def mark(ids: list[str]) -> object:
        now = time.time_ns() // 1_000_000
        if not settings.redis_cluster:  # a cluster's keys live on several nodes
            done = fast_lane.confirm_drained(
                settings.store_url(), settings.key_prefix, sid, ids, now
            )
            if done is not fast_lane.UNSUPPORTED:
                return done
        return _library_store(settings).confirm_notices(sid, ids, "drain", now)  # TLS, a cluster

    return mark


def touch_seen(sid: str) -> None:
    """Record that the session's harness was seen (``last_seen``), marked by the time of
    ``$INBOX_HOME/seen/<sid>``. Best effort: with Redis down the marker is taken back, so
    the next tool step tries again. On a cluster (or TLS) the library's client writes it:
    at most once a minute a session, so its import is paid rarely."""
    from bus.store import fast_lane

    load_hook_env()  # a hook's Redis URL with a password is kept in hooks.env.json
    settings = Settings.from_env()
    marker = settings.home / "seen" / sid
    try:
        marker.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        marker.touch(mode=0o600)  # first, so concurrent hooks do not all go to Redis
    except OSError as exc:
        sys.stderr.write(f"inbox: last_seen of {sid} not recorded: {marker}: {exc.strerror}\n")
        return
    try:
        now = time.time_ns() // 1_000_000
        spoken = not settings.redis_cluster and fast_lane.touch_seen(
            settings.store_url(), settings.key_prefix, sid, now
        )
        if not spoken:
            _library_store(settings).touch_seen(sid, now)
    except _lane_errors(settings) as exc:
        marker.unlink(missing_ok=True)  # not recorded: due again at the next tool step
        sys.stderr.write(
            f"inbox: last_seen of {sid} not recorded ({outage_words(exc)}); "
            "tried again at the next tool step\n"
        )


def drain(settings: Settings, sid: str, *, stamped: bool) -> list[dict[str, Any]] | str:
    """What ``Bus.drain`` does, on the fast lane."""
    floor = Floor(settings.home, fsync=floor_sync(settings))
    result = floor.drain(check_session_id(sid))
    faults.point("drain:after_unlink")
    record_drained(floor, sid, notice_ids(result.taken), _mark_over_resp(settings, sid))
    floor.handed_on(sid, result.lines)
    lines = result.handed(floor.malformed_path(sid))
    if not stamped:
        return lines
    from bus.core.notices import render_drained
    from bus.core.stamp import render_stamp

    return render_drained(lines, render_stamp)


def drain_command(sid: str, stamped: bool) -> int:
    """``inbox drain SID [--stamped]`` with something on the floor."""
    try:
        lines = drain(Settings.from_env(), sid, stamped=False)
    except (ValueError, OSError) as exc:
        error, code = ("bad_input", 2) if isinstance(exc, ValueError) else ("os_error", 1)
        sys.stdout.write(json.dumps({"ok": False, "error": error, "message": str(exc)}) + "\n")
        sys.stderr.write(f"inbox: {exc}\n")
        return code
    assert isinstance(lines, list)
    words = skipped_words(lines)
    if words:
        sys.stderr.write(words + "\n")
    if stamped:
        from bus.core.notices import render_drained
        from bus.core.stamp import render_stamp

        out = render_drained(lines, render_stamp)
        sys.stdout.write(out + ("\n" if out else ""))
    else:
        sys.stdout.write(json.dumps(lines, ensure_ascii=False) + "\n")
    return 0


def post_tool_use(sid: str) -> int:
    """The ``PostToolUse`` hook with something on the floor: new text goes to the model as
    ``additionalContext``. Exits 0 whatever breaks, as every hook does."""
    try:
        load_hook_env()  # a hook's Redis URL with a password is kept in hooks.env.json
        text = drain(Settings.from_env(), sid, stamped=True)
    except Exception as exc:  # a hook must not fail the user's session, whatever broke
        sys.stderr.write(f"inbox hook: drain failed: {type(exc).__name__}: {exc}\n")
        return 0
    text = str(text).strip()
    if text:
        context = {"hookEventName": "PostToolUse", "additionalContext": text}
        sys.stdout.write(json.dumps({"hookSpecificOutput": context}, ensure_ascii=False) + "\n")
    sys.stdout.flush()
    return 0


__all__ = ["drain", "drain_command", "pending_ids", "post_tool_use", "record_drained"]
