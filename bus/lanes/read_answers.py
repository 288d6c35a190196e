"""What the read commands' fast lane answers: each command's JSON, rendered as the
library's :class:`~bus.api.Bus` method renders it, from the store's reads
(``reads``: a bus.lanes.lite_store.LiteStore) with the library's own views (the receipt rules, the thread rows,
the item view, the status report: the stdlib-only modules of bus.core both use).

Each answer raises :class:`FullPath` where the full command line would refuse or write;
bus.lanes.read then hands the command on.
"""

from __future__ import annotations

import json
import time

from bus.core.item_views import inbox_view
from bus.core.lane_names import SESSION_STATES
from bus.core.receipt_rules import (
    SENT_LIMIT_MAX,
    STATES,
    host_waits,
    outbox_view,
    public,
    receipt_views,
)
from bus.core.status_view import (
    local_sessions,
    memory_report,
    queue_of,
    status_report,
    worker_rows,
)
from bus.core.thread_views import thread_rows, thread_view
from bus.store.packing import json_list

# Not ``typing.TYPE_CHECKING``: importing typing alone costs the lane several ms.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class FullPath(Exception):
    """The full command line answers this one (it refuses, writes, or knows more)."""


def _now_ms() -> int:
    return int(time.time() * 1000)


# -- the commands ---------------------------------------------------------------------------


def _session(reads: Any, sid: str) -> dict[str, Any]:
    row = reads.get_session(sid)
    if row is None:
        raise FullPath("no such session")
    return _checked(row)


def _checked(row: dict[str, Any]) -> dict[str, Any]:
    """A session record SessionInfo would take as it is (else the full path says why)."""
    from bus.core.ids import check_session_id

    check_session_id(row["session"])
    if row["state"] not in SESSION_STATES:
        raise FullPath("a session state SessionInfo refuses")
    return row


def threads(reads: Any, settings: Any, sid: str) -> dict[str, Any]:
    """``Bus.threads``: the session's threads, newest first."""
    _session(reads, sid)
    thread_ids = reads.threads_of(sid)
    rows = thread_rows(
        thread_ids, reads.thread_metas(thread_ids), reads.all_records(sid), json_list
    )
    return {"ok": True, "session": sid, "threads": rows}


def read(reads: Any, settings: Any, sid: str, thread: str) -> dict[str, Any]:
    """``Bus.read`` without ``mark_read``: a whole thread, oldest first."""
    from bus.core.ids import check_session_id

    check_session_id(sid)
    meta = reads.thread_meta(thread)
    if not meta or sid not in json_list(meta.get("parties")):
        raise FullPath("no such thread, or not a party")
    msgs = [json.loads(fields["m"]) for fields in reads.thread_log(thread)]
    recs = {r["id"]: r for r in reads.records(sid, [m["id"] for m in msgs])}
    return {"ok": True, **thread_view(thread, meta, msgs, recs)}


def _receipts(
    reads: Any, settings: Any, rows: list[tuple[str, str]]
) -> list[dict[str, Any] | None]:
    """``Receipts._read``: each ``(recipient, id)``'s receipt, ``None`` where none."""
    now = _now_ms()
    views = receipt_views(reads.receipt_rows(rows), rows, now, settings.stale_s)
    return host_waits(views, reads.beats_at, now, settings.host_down_s)


def sent(reads: Any, settings: Any, sid: str, state: str | None, limit: int) -> dict[str, Any]:
    """``Bus.sent``: the outbox, newest first, each with its receipt."""
    from bus.core.ids import check_session_id

    check_session_id(sid)
    if (state is not None and state not in STATES) or not 1 <= limit <= SENT_LIMIT_MAX:
        raise FullPath("a bad --state or --limit")
    rows = outbox_view(
        limit,
        state,
        lambda start, count: reads.outbox_page(sid, start, count),
        lambda rows: _receipts(reads, settings, rows),
        _aged_out,
    )
    return {"ok": True, "session": sid, "sent": rows}


def _aged_out(entries: list[str]) -> None:
    raise FullPath("a receipt aged out: the full path drops it from the outbox")


def receipt(reads: Any, settings: Any, msg_id: str, by: str | None) -> dict[str, Any]:
    """``Bus.receipt`` without a wait: one message's receipt, for its sender only."""
    import re

    from bus.core.ids import MESSAGE_ID_PATTERN, check_session_id

    if not re.fullmatch(MESSAGE_ID_PATTERN, msg_id):
        raise FullPath("a bad message id")
    me = check_session_id(by or settings.session or "")
    to = reads.recipient_of(msg_id, _now_ms())
    found = _receipts(reads, settings, [(to, msg_id)])[0] if to else None
    if found is None or found["_from_session"] != me:
        raise FullPath("no receipt, or not the sender")
    return public(found)


def read_inbox(reads: Any, settings: Any, sid: str) -> dict[str, Any]:
    """``read-inbox``: every item, newest update first, each with its thread oldest first."""
    from bus.core.ids import check_session_id

    _session(reads, sid)
    items = inbox_view(
        reads.items_of(sid),
        lambda ws: reads.members(check_session_id(ws, "workspace")),
        lambda key: reads.item_thread(sid, key),
    )
    return {"ok": True, "items": items}


def status(reads: Any, settings: Any) -> dict[str, Any]:
    """``Bus.status``: sessions, their states and backlogs, workers, memory settings."""
    from bus.core.disk_space import with_disk
    from bus.core.locate import redact
    from bus.core.store_faults import with_storage
    from bus.core.wake_consent import wake_off
    from bus.local.unix_socket import session_problems
    from bus.local.up_procs import read_procs

    rows = [_checked(row) for row in reads.sessions()]
    answer = status_report(
        host=settings.host,
        store=redact(settings.store_url()),
        home=str(settings.home),
        sessions=rows,
        backlogs=reads.backlogs([r["session"] for r in rows]),
        workers=worker_rows(
            reads.beats(queue_of), _now_ms(), reads.host_floors, settings.host_down_s
        ),
        memory=memory_report(reads.memory_report()),
        unreachable=session_problems(settings.home, local_sessions(settings.host, rows)),
        processes=read_procs(settings.home),
        wake_off=wake_off(str(settings.home), settings.host, rows),
    )
    return with_disk(with_storage(answer, reads.write_fault()), str(settings.home))
