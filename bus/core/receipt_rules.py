"""The receipt rules: which state a receipt shows, what the inbox's records prove, and
one receipt as a sender reads it. Pure, and standard library only: the library
(:mod:`bus.delivery.receipts`) and the read lane (:mod:`bus.lanes.read_answers`) both
answer with these.
"""

from __future__ import annotations

import json

# Not ``typing.TYPE_CHECKING``: importing typing alone costs the read lane several ms.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

ORDER = ("stored", "noticed", "read", "answered")
EXITS = ("withdrawn", "retracted", "bounced", "expired")
STATES = ORDER + EXITS
SENT_LIMIT_MAX = 1000  # the most receipts one ``sent`` lists


def receipt_state(reached: dict[str, int | None]) -> str:
    """The state a receipt shows: the latest side exit, else the furthest step reached.

    ``reached`` maps each state the message reached to when (``None``: reached, time
    unknown).
    """
    exits = [(reached[s] or 0, s) for s in EXITS if s in reached]
    if exits:
        return max(exits)[1]
    for state in reversed(ORDER):
        if state in reached:
            return state
    return "stored"


def is_reached(state: str, want: str) -> bool:
    """Whether a message in ``state`` has reached ``want`` (a side exit ends any wait)."""
    if state in EXITS:
        return True
    return ORDER.index(state) >= ORDER.index(want)


def recipient_state(state: str | None, last_seen: int, now: int, stale_s: float) -> str:
    """The recipient's state for a sender: ``stale`` when its harness has not been seen
    for ``stale_s`` (a closed or closing session says so instead)."""
    if state is None:
        return "unknown"
    if state in ("closing", "closed"):
        return state
    if last_seen and now - last_seen > stale_s * 1000:
        return "stale"
    return state


def from_records(
    stamped: dict[str, int], rec: dict[str, Any] | None, answer: dict[str, Any] | None
) -> dict[str, int | None]:
    """The states reached: the receipt's stamps, plus what the inbox's own records prove
    (the recipient's mark, the send answer) for a stamp that was missed."""
    reached: dict[str, int | None] = dict(stamped)
    mark = (rec or {}).get("mark")
    ans_state = (answer or {}).get("state")
    proven: list[tuple[str, Any]] = []
    if mark in ("noticed", "read", "answered", "retracted"):
        # floor_drained.lua, the one place marks move new -> noticed, stamps noticed_at.
        proven.append(("noticed", (rec or {}).get("noticed_at")))
    if mark == "read":
        proven.append(("read", None))
    if ans_state == "answered" and "answer" in (answer or {}):
        proven.append(("answered", (rec or {}).get("answered_at")))
    if ans_state == "withdrawn" or mark == "removed":
        proven.append(("withdrawn", None))
    if ans_state == "retracted" or mark == "retracted":
        proven.append(("retracted", None))
    if mark == "expired":
        proven.append(("expired", (rec or {}).get("expired_at")))
    for state, at in proven:
        if state not in reached:
            reached[state] = int(at) if at else None
    return reached


def receipt_views(
    got: list[Any], rows: list[tuple[str, str]], now: int, stale_s: float
) -> list[dict[str, Any] | None]:
    """Each ``(recipient, id)`` row's receipt from what the store read for it
    (:meth:`bus.store.receipts.ReceiptStore.receipt_rows`), ``None`` where none."""
    out: list[dict[str, Any] | None] = []
    for n, (to, msg_id) in enumerate(rows):
        h, rec, ans, (s_state, last_seen, opened_at, *where) = got[n]
        if not h:
            out.append(None)
            continue
        stamped = {s: int(h[s]) for s in STATES if h.get(s)}
        reached = from_records(
            stamped, json.loads(rec) if rec else None, json.loads(ans) if ans else None
        )
        seen = int(last_seen or 0) or int(opened_at or 0)
        receipt: dict[str, Any] = {
            "ok": True,
            "id": msg_id,
            "to": to,
            "thread": h.get("thread") or None,
            "state": receipt_state(reached),
            "at": {s: reached[s] for s in STATES if reached.get(s)},
            "recipient": {
                "session": to,
                "state": recipient_state(s_state or None, seen, now, stale_s),
                "last_seen": seen or None,
            },
            "_host": where[0] if where else None,
            "_from": h.get("from"),
            "_from_session": h.get("from_session"),
        }
        if h.get("reason"):
            receipt["reason"] = h["reason"]
        if receipt["state"] == "answered" and ans and "answer" in json.loads(ans):
            receipt["answer"] = json.loads(ans)["answer"]  # the turn's answer, as --wait gets
        out.append(receipt)
    return out


def public(receipt: dict[str, Any]) -> dict[str, Any]:
    """A receipt as its sender reads it: without the fields kept for the checks (``_…``)."""
    return {k: v for k, v in receipt.items() if not k.startswith("_")}


def outbox_view(
    limit: int,
    state: str | None,
    page_of: Callable[[int, int], list[str]],
    receipts_of: Callable[[list[tuple[str, str]]], list[dict[str, Any] | None]],
    gone: Callable[[list[str]], None],
) -> list[dict[str, Any]]:
    """Up to ``limit`` sent messages' receipts, newest first, those in ``state`` only if
    given. ``page_of(start, count)`` reads the outbox's ``recipient|id`` entries,
    ``receipts_of`` their receipts; the entries whose receipt aged out go to ``gone``,
    which drops them from the outbox (the pages after move up by as many)."""
    rows: list[dict[str, Any]] = []
    start, page = 0, max(limit, 100)
    while len(rows) < limit:
        members = page_of(start, page)
        if not members:
            break
        start += page
        pairs = [tuple(m.split("|", 1)) for m in members]
        lost = []
        for member, found in zip(members, receipts_of([(p[0], p[1]) for p in pairs]), strict=True):
            if found is None:
                lost.append(member)
            elif state is None or found["state"] == state:
                rows.append(public(found))
        if lost:
            gone(lost)
            start -= len(lost)
    return rows[:limit]


# What a message waits for while its receiver's host is in each state but ``up``.
HOST_WAITS = {
    "down": "which is down (no worker beating)",
    "starting": "whose worker is starting (no beat yet)",
    "unseen": "which no worker has served yet (run `inbox up` there)",
}


def host_waits(
    receipts: list[dict[str, Any] | None],
    beats_at: Callable[[list[str]], list[tuple[int | None, int | None]]],
    now: int,
    down_s: float,
) -> list[dict[str, Any] | None]:
    """Each receipt still ``stored`` (no notice yet) with its recipient's ``host_state``
    (``beats_at`` reads the hosts' last beats, one call for all), and ``waiting`` saying
    it waits for its host when that host is down."""
    waiting = [r for r in receipts if r is not None and r["state"] == "stored" and r.get("_host")]
    hosts = sorted({str(r["_host"]) for r in waiting})
    if not hosts:
        return receipts
    from bus.core.status_view import host_state

    states = {h: host_state(at, now, down_s) for h, at in zip(hosts, beats_at(hosts), strict=True)}
    for r in waiting:
        host = str(r["_host"])
        r["recipient"]["host_state"] = states[host]
        if states[host] in HOST_WAITS:
            r["waiting"] = f"for its host {host}, {HOST_WAITS[states[host]]}"
    return receipts
