"""The drain's lane: take the floor and record the marks without redis-py or pydantic.

A harness drains at every tool step; when something waits there, ``inbox drain SID`` and
the ``PostToolUse`` hook come here from bus.lanes.entry. The floor is drained exactly as
:meth:`bus.api.Bus.drain` drains it (bus.delivery.floor: claim by rename, log, then
unlink) and the notices taken are confirmed as the library confirms them
(bus.delivery.drain_marks: ``floor_drained.lua``, or ``marks.pending.jsonl`` with Redis
down), the script sent over :mod:`bus.lanes.writes` instead of redis-py, whose import alone
costs more than the rest. A store this lane's client does not speak (TLS, a cluster) is
written through the library's own store.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

from bus.core import faults
from bus.core.hook_env import load_hook_env
from bus.core.ids import check_session_id
from bus.core.lane_names import SEEN
from bus.core.settings import Settings
from bus.delivery.drain_marks import notice_ids, outage_words, record_drained
from bus.delivery.floor import Floor
from bus.delivery.floor_result import floor_sync, skipped_words

from . import writes


def lane_words(exc: BaseException) -> str:
    """What kept Redis from taking this lane's write, in words: the server's own refusal
    (an error reply of :mod:`bus.lanes.resp`), else as the library says an outage."""
    if writes.is_refusal(exc):
        return f"Redis refused ({exc})"
    return outage_words(exc)


def _library_store(settings: Settings) -> Any:
    """The library's own store (redis-py): for what this lane's client does not speak."""
    from bus.store.connection import redis_client
    from bus.store.keys import Keys
    from bus.store.store import Store

    return Store(redis_client(settings), Keys(settings.key_prefix))


def _lane_errors(settings: Settings) -> tuple[type[BaseException], ...]:
    """What a drain's or a touch's write raises when Redis does not take it: this lane's,
    and on a cluster (the library's path) redis-py's."""
    if not settings.redis_cluster:
        return writes.FAST_LANE_ERRORS
    from bus.store.outage_log import OUTAGE_ERRORS

    return (*writes.FAST_LANE_ERRORS, *OUTAGE_ERRORS)


def _mark_over_resp(settings: Settings, sid: str) -> Callable[[list[str]], object]:
    def mark(ids: list[str]) -> object:
        now = time.time_ns() // 1_000_000
        if not settings.redis_cluster:  # a cluster's keys live on several nodes
            done = writes.confirm_drained(settings.store_url(), settings.key_prefix, sid, ids, now)
            if done is not writes.UNSUPPORTED:
                return done
        store = _library_store(settings)  # TLS, a cluster
        return store.inbox.confirm_notices(sid, ids, "drain", now)

    return mark


def touch_seen(sid: str) -> None:
    """Record that the session's harness was seen (``last_seen``), marked by the time of
    ``$INBOX_HOME/seen/<sid>``. Best effort: with Redis down the marker is taken back, so
    the next tool step tries again. On a cluster (or TLS) the library's client writes it:
    at most once a minute a session, so its import is paid rarely."""
    load_hook_env()  # a hook's Redis URL with a password is kept in hooks.env.json
    settings = Settings.from_env()
    marker = settings.home / SEEN / sid
    try:
        marker.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        marker.touch(mode=0o600)  # first, so concurrent hooks do not all go to Redis
    except OSError as exc:
        sys.stderr.write(f"inbox: last_seen of {sid} not recorded: {marker}: {exc.strerror}\n")
        return
    try:
        now = time.time_ns() // 1_000_000
        spoken = not settings.redis_cluster and writes.touch_seen(
            settings.store_url(), settings.key_prefix, sid, now
        )
        if not spoken:
            store = _library_store(settings)
            store.sessions.touch_seen(sid, now)
    except _lane_errors(settings) as exc:
        marker.unlink(missing_ok=True)  # not recorded: due again at the next tool step
        sys.stderr.write(
            f"inbox: last_seen of {sid} not recorded ({lane_words(exc)}); "
            "tried again at the next tool step\n"
        )


def drain(settings: Settings, sid: str, *, stamped: bool) -> list[dict[str, Any]] | str:
    """What ``Bus.drain`` does, on this lane."""
    floor = Floor(settings.home, fsync=floor_sync(settings))
    result = floor.drain(check_session_id(sid))
    faults.point("drain:after_unlink")
    mark = _mark_over_resp(settings, sid)
    record_drained(floor, sid, notice_ids(result.taken), mark, lane_words)
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


__all__ = ["drain", "drain_command", "lane_words", "post_tool_use", "touch_seen"]
