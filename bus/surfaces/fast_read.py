"""The read commands' fast lane: ``status``, ``threads``, ``read``, ``sent``, ``receipt``
and ``read-inbox`` answered without the library.

Importing the library (redis-py and its asyncio, typer, pydantic, rich) costs a read command
most of its time. bus.surfaces.entry hands these commands here first: the argv is parsed
with the standard library, the store's own read methods run over a small RESP client
(bus.store.lite_reads), and the JSON printed is the one the command line prints, byte for
byte (tests/test_fast_read.py runs each command both ways on many states).

Whatever is unusual answers ``None`` and the full command line answers instead, so nothing
a user sees differs: an option this lane does not know, ``--help``, anything the full path
would refuse (a bad id, an unknown session or thread, not the sender), a write the full
path would make (``read --mark-read``, an outbox entry whose receipt aged out), a wait
(``receipt --wait-for``), authentication on
(``INBOX_SECRET``: the full path checks the token), a cluster or TLS URL, Redis not
answering, or any error at all. ``INBOX_FAST_READ=0`` sends every command to the full path.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable

# Not ``typing.TYPE_CHECKING``: importing typing alone costs the lane several ms.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

COMMANDS = ("status", "threads", "read", "sent", "receipt", "read-inbox")
OFF_VAR = "INBOX_FAST_READ"

# -- argv ---------------------------------------------------------------------------------

# Per command: its positional arguments, and its options: "flag", "value", or "full" (the
# full path answers when it is given).
_ARGV: dict[str, tuple[int, dict[str, str]]] = {
    "status": (0, {}),
    "threads": (1, {}),
    "read": (2, {"--mark-read": "full"}),
    "sent": (1, {"--state": "value", "--limit": "value"}),
    "receipt": (1, {"--by": "value", "--wait-for": "full", "--timeout": "full"}),
    "read-inbox": (1, {}),
}


def parse(argv: list[str]) -> tuple[str, list[str], dict[str, str]] | None:
    """``(command, arguments, options)`` when the lane can answer ``argv``, else None."""
    if not argv or argv[0] not in _ARGV:
        return None
    count, known = _ARGV[argv[0]]
    args: list[str] = []
    opts: dict[str, str] = {}
    rest = iter(argv[1:])
    for word in rest:
        if not word.startswith("-"):
            args.append(word)
            continue
        name, eq, value = word.partition("=")
        kind = known.get(name)
        if kind is None or kind == "full" or name in opts:
            return None  # --help, a short option, "--", one the lane does not take
        if kind == "value" and not eq:
            value = next(rest, "")
        if kind == "value" and (not value or value.startswith("-")):
            return None
        opts[name] = value
    if len(args) != count:
        return None
    return argv[0], args, opts


# -- the receipt rules (bus.delivery.receipts; tests/test_fast_read.py holds them equal) ------

ORDER = ("stored", "noticed", "read", "answered")
EXITS = ("withdrawn", "retracted", "bounced", "expired")
STATES = ORDER + EXITS
SENT_LIMIT_MAX = 1000
SESSION_STATES = ("idle", "running", "closing", "closed")  # SessionInfo.state
SCHEDULER = "scheduler"  # bus.telemetry.liveness.SCHEDULER


def host_queue(host: str) -> str:
    """bus.telemetry.liveness.host_queue."""
    return f"host.{host}"


def receipt_state(reached: dict[str, int | None]) -> str:
    exits = [(reached[s] or 0, s) for s in EXITS if s in reached]
    if exits:
        return max(exits)[1]
    for state in reversed(ORDER):
        if state in reached:
            return state
    return "stored"


def recipient_state(state: str | None, last_seen: int, now: int, stale_s: float) -> str:
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
    reached: dict[str, int | None] = dict(stamped)
    mark = (rec or {}).get("mark")
    ans_state = (answer or {}).get("state")
    proven: list[tuple[str, Any]] = []
    if mark in ("noticed", "read", "answered", "retracted"):
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


class FullPath(Exception):
    """The full command line answers this one (it refuses, writes, or knows more)."""


def _now_ms() -> int:
    return int(time.time() * 1000)


# -- the commands ---------------------------------------------------------------------------


def _list(raw: str | None) -> list[str]:
    value = json.loads(raw) if raw else []
    return [str(v) for v in value] if isinstance(value, list) else []


def _session(store: Any, sid: str) -> dict[str, Any]:
    row = store.get_session(sid)
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


def threads(store: Any, settings: Any, sid: str) -> dict[str, Any]:
    """``Bus.threads``: the session's threads, newest first."""
    _session(store, sid)
    thread_ids = store.threads_of(sid)
    mine: dict[str, list[dict[str, Any]]] = {}
    for rec in store.all_records(sid):
        mine.setdefault(rec["thread"], []).append(rec)
    out = []
    for thr, meta in zip(thread_ids, store.thread_metas(thread_ids), strict=True):
        recs = mine.get(thr, [])
        unread = [x for x in recs if x["mark"] in ("new", "noticed")]
        row: dict[str, Any] = {
            "threadId": thr,
            "key": meta.get("key", ""),
            "label": meta.get("label", thr),
            "from": _list(meta.get("senders")),
            "unread": len(unread),
            "new": sum(1 for x in recs if x["mark"] == "new"),
            "count": int(meta.get("count", 0)),
            "newestAt": int(meta.get("newest_at", 0)),
            "newestPreview": meta.get("newest_preview", ""),
            "class": "blocker"
            if any(x["class"] == "blocker" for x in unread)
            else meta.get("class", "action"),
        }
        if meta.get("state"):
            row["state"] = meta["state"]
        out.append(row)
    return {"ok": True, "session": sid, "threads": out}


def read(store: Any, settings: Any, sid: str, thread: str) -> dict[str, Any]:
    """``Bus.read`` without ``mark_read``: a whole thread, oldest first."""
    from bus.core.ids import check_session_id

    check_session_id(sid)
    meta = store.thread_meta(thread)
    if not meta or sid not in _list(meta.get("parties")):
        raise FullPath("no such thread, or not a party")
    msgs = [json.loads(fields["m"]) for fields in store.thread_log(thread)]
    recs = {r["id"]: r for r in store.records(sid, [m["id"] for m in msgs])}
    out = []
    for m in msgs:
        rec = recs.get(m["id"])
        mark = rec["mark"] if rec else "read"
        item: dict[str, Any] = {
            "id": m["id"],
            "from": m["from"],
            "fromSession": m.get("from_session"),
            "class": m.get("class", "action"),
            "kind": m.get("kind", "message"),
            "at": m.get("ts"),
            "text": m.get("text", ""),
            "read": mark in ("read", "answered"),
            "verified": m.get("verified") is True,
        }
        if mark in ("retracted", "removed"):
            item["withdrawn"] = mark
        if m.get("files"):
            item["files"] = m["files"]
        out.append(item)
    result: dict[str, Any] = {"threadId": thread, "label": meta.get("label", thread)}
    result["messages"] = out
    if meta.get("state"):
        result["state"] = meta["state"]
    return {"ok": True, **result}


def _receipts(
    store: Any, settings: Any, rows: list[tuple[str, str]]
) -> list[dict[str, Any] | None]:
    """``Receipts._read``: each ``(recipient, id)``'s receipt, ``None`` where none."""
    got = store.receipt_rows(rows)
    now, stale_s = _now_ms(), settings.stale_s
    out: list[dict[str, Any] | None] = []
    for n, (to, msg_id) in enumerate(rows):
        h, rec, ans, (s_state, last_seen, opened_at) = got[n]
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
            "_from": h.get("from"),
            "_from_session": h.get("from_session"),
        }
        if h.get("reason"):
            receipt["reason"] = h["reason"]
        if receipt["state"] == "answered" and ans and "answer" in json.loads(ans):
            receipt["answer"] = json.loads(ans)["answer"]
        out.append(receipt)
    return out


def _public(receipt: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in receipt.items() if not k.startswith("_")}


def sent(store: Any, settings: Any, sid: str, state: str | None, limit: int) -> dict[str, Any]:
    """``Bus.sent``: the outbox, newest first, each with its receipt."""
    from bus.core.ids import check_session_id

    check_session_id(sid)
    if (state is not None and state not in STATES) or not 1 <= limit <= SENT_LIMIT_MAX:
        raise FullPath("a bad --state or --limit")
    rows: list[dict[str, Any]] = []
    start, page = 0, max(limit, 100)
    while len(rows) < limit:
        members = store.outbox_page(sid, start, page)
        if not members:
            break
        start += page
        pairs = [tuple(m.split("|", 1)) for m in members]
        for found in _receipts(store, settings, [(p[0], p[1]) for p in pairs]):
            if found is None:
                raise FullPath("a receipt aged out: the full path drops it from the outbox")
            if state is None or found["state"] == state:
                rows.append(_public(found))
    return {"ok": True, "session": sid, "sent": rows[:limit]}


def receipt(store: Any, settings: Any, msg_id: str, by: str | None) -> dict[str, Any]:
    """``Bus.receipt`` without a wait: one message's receipt, for its sender only."""
    import re

    from bus.core.ids import MESSAGE_ID_PATTERN, check_session_id

    if not re.fullmatch(MESSAGE_ID_PATTERN, msg_id):
        raise FullPath("a bad message id")
    me = check_session_id(by or settings.session or "")
    to = store.recipient_of(msg_id, _now_ms())
    found = _receipts(store, settings, [(to, msg_id)])[0] if to else None
    if found is None or found["_from_session"] != me:
        raise FullPath("no receipt, or not the sender")
    return _public(found)


# bus.services.items's (a test holds them equal).
ITEM_VIEW_FIELDS = ("key", "title", "status", "answer", "revision", "settledAt", "updatedAt")
YOU, FORMER_MEMBER, ACTIVE = "you", "a former member", "active"


def _entry_view(entry: dict[str, Any], statuses: dict[str, str]) -> dict[str, Any]:
    if entry.get("by") == "agent":
        who = YOU
    else:
        name = str(entry.get("member", ""))
        who = name if statuses.get(name) == ACTIVE else FORMER_MEMBER
    out: dict[str, Any] = {"from": who, "text": entry.get("text", "")}
    if entry.get("files"):
        out["files"] = list(entry["files"])
    return out


def read_inbox(store: Any, settings: Any, sid: str) -> dict[str, Any]:
    """``read-inbox``: every item, newest update first, each with its thread oldest first."""
    from bus.core.ids import check_session_id

    _session(store, sid)
    items = store.items_of(sid)
    items.sort(key=lambda i: (-int(i.get("updatedAt") or 0), str(i.get("key"))))
    statuses: dict[str, dict[str, str]] = {}
    out = []
    for item in items:
        ws = item.get("workspace")
        if ws and ws not in statuses:
            statuses[ws] = store.members(check_session_id(ws, "workspace"))
        view = {f: item.get(f) for f in ITEM_VIEW_FIELDS}
        member_of = statuses.get(ws or "", {})
        view["thread"] = [_entry_view(e, member_of) for e in store.item_thread(sid, item["key"])]
        out.append(view)
    return {"ok": True, "items": out}


def _floor_json(fields: dict[str, str]) -> dict[str, Any]:
    """bus.telemetry.host_floor's ``_floor_json``."""
    machine, _, home = fields.get("floor", "").partition("\t")
    out: dict[str, Any] = {"machine": machine, "home": home}
    if fields.get("pid", "").isdigit():
        out["pid"] = int(fields["pid"])
    return out


def _workers(store: Any) -> list[dict[str, Any]]:
    """bus.telemetry.liveness.workers: each heartbeat's ages, queue depth and floor."""
    beats = store.beats(lambda name: None if name == SCHEDULER else host_queue(name))
    now = _now_ms()
    rows = []
    for name, beat, depth in beats:
        row: dict[str, Any] = {"name": name, "role": "scheduler" if name == SCHEDULER else "worker"}
        for field, out in (("beat", "beat_age_s"), ("progress", "progress_age_s")):
            if beat.get(field):
                row[out] = round(max(0, now - int(beat[field])) / 1000, 1)
        if beat.get("pid"):
            row["pid"] = int(beat["pid"])
        if beat.get("done"):
            row["done"] = int(beat["done"])
        if name != SCHEDULER:
            row["queue"] = depth
        rows.append(row)
    hosts = [row["name"] for row in rows if row["role"] == "worker"]
    for row, (claim, refusal) in zip(
        [r for r in rows if r["role"] == "worker"], store.host_floors(hosts), strict=True
    ):
        if claim.get("floor"):
            row["floor"] = _floor_json(claim)
        if refusal.get("floor"):
            refused = _floor_json(refusal)
            if refusal.get("at", "").isdigit():
                refused["at"] = int(refusal["at"])
            refused["holder"] = _floor_json(
                {"floor": refusal.get("holder", ""), "pid": refusal.get("holder_pid", "")}
            )
            row["refused"] = refused
    return rows


def status(store: Any, settings: Any) -> dict[str, Any]:
    """``Bus.status``: sessions, their states and backlogs, workers, memory settings."""
    from bus.core.locate import redact

    rows = [_checked(row) for row in store.sessions()]
    sessions = []
    for row, backlog in zip(rows, store.backlogs([r["session"] for r in rows]), strict=True):
        shown = {k: v for k, v in row.items() if v is not None}
        shown["backlog"] = backlog
        sessions.append(shown)
    workers = _workers(store)
    memory: dict[str, Any] = {}
    for name, raw in store.memory_report().items():
        try:
            memory[name] = json.loads(raw)
        except ValueError:
            continue
    return {
        "ok": True,
        "host": settings.host,
        "store": redact(settings.store_url()),
        "home": str(settings.home),
        "sessions": sessions,
        "workers": workers,
        "memory_settings": memory,
    }


def _limit(raw: str | None) -> int:
    if raw is None:
        return 50
    if not (raw.isascii() and raw.isdigit()):
        raise FullPath("a --limit the full path parses")
    return int(raw)


_ANSWER: dict[str, Callable[[Any, Any, list[str], dict[str, str]], dict[str, Any]]] = {
    "status": lambda st, s, a, o: status(st, s),
    "threads": lambda st, s, a, o: threads(st, s, a[0]),
    "read": lambda st, s, a, o: read(st, s, a[0], a[1]),
    "sent": lambda st, s, a, o: sent(st, s, a[0], o.get("--state"), _limit(o.get("--limit"))),
    "receipt": lambda st, s, a, o: receipt(st, s, a[0], o.get("--by")),
    "read-inbox": lambda st, s, a, o: read_inbox(st, s, a[0]),
}


def answer(argv: list[str]) -> int | None:
    """Answer ``inbox ARGV`` here and return its exit code, or None (nothing printed)
    for the full command line to answer."""
    if os.environ.get(OFF_VAR, "").strip().lower() in ("0", "false", "no", "off"):
        return None
    parsed = parse(argv)
    if parsed is None:
        return None
    command, args, opts = parsed
    try:
        out = _run(command, args, opts)
    except Exception:  # a refusal, an outage, anything: the full path says it its way
        return None
    if out is None:
        return None
    sys.stdout.write(json.dumps(out, ensure_ascii=False) + "\n")
    sys.stdout.flush()
    return 0


# INBOX_* settings that are not numbers (bus.core.settings.Settings.from_env); any other
# one set to what is not a finite number sends the command to the full path, which
# refuses a bad number in words (or knows a setting this lane does not).
_TEXT_SETTINGS = (
    "INBOX_HOME", "INBOX_HOST", "INBOX_REDIS_URL", "INBOX_BROKER_URL", "INBOX_BROKER_MASTER_NAME",
    "INBOX_SESSION", "INBOX_AGENT_INBOX", "INBOX_TOKEN", "INBOX_KEY_PREFIX", "INBOX_UI_URL",
    "INBOX_ALLOWED_HOSTS", "INBOX_KICK", "INBOX_MEMORY_SETTINGS", "INBOX_DISPATCHER",
    "INBOX_HANDLE", "INBOX_SANDBOX_ROOT", "INBOX_FLOWER_AUTH", OFF_VAR,
)  # fmt: skip


class Place:
    """What the lane reads of ``Settings.from_env()`` (the same values: a test holds them
    equal); None from :meth:`of` where the full path reads more (a secret, a cluster)."""

    def __init__(self, env: dict[str, str] | os._Environ[str]) -> None:
        from bus.core.locate import default_home, default_host

        self.home = default_home(dict(env))
        self.host = env.get("INBOX_HOST") or default_host()
        self.redis_url = env.get("INBOX_REDIS_URL") or None
        self.session = env.get("INBOX_SESSION") or None
        self.key_prefix = env.get("INBOX_KEY_PREFIX") or "inbox"
        self.stale_s = float(env.get("INBOX_STALE_S") or 3600.0)

    @classmethod
    def of(cls, env: dict[str, str] | os._Environ[str]) -> Place | None:
        if env.get("INBOX_SECRET") or env.get("INBOX_REDIS_CLUSTER"):
            return None  # tokens are checked on the full path; a cluster needs its client
        for name, value in env.items():
            if name.startswith("INBOX_") and value and name not in _TEXT_SETTINGS:
                number = float(value)  # ValueError: the full path refuses it in words
                if number != number or number in (float("inf"), float("-inf")):
                    return None
        return cls(env)

    def store_url(self) -> str:
        """``Settings.store_url``: ``INBOX_REDIS_URL``, else the embedded server's socket."""
        from bus.core.locate import embedded_url

        return self.redis_url or embedded_url(self.home)


def spoken(url: str) -> bool:
    """Whether the small client connects to ``url`` as redis-py does: a user needs a
    password (redis-py sends ``AUTH user ""``), and no query but a unix socket's ``db``."""
    from urllib.parse import parse_qsl, urlsplit

    parts = urlsplit(url)
    if parts.username and parts.password is None:
        return False
    query = [k for k, _v in parse_qsl(parts.query, keep_blank_values=True)]
    return not query or (parts.scheme == "unix" and query == ["db"])


CONNECT_TIMEOUT_S = 2.0  # a slow Redis: the full path answers (and waits as it waits)


def _run(command: str, args: list[str], opts: dict[str, str]) -> dict[str, Any] | None:
    from bus.store import resp_client
    from bus.store.keys import Keys
    from bus.store.lite_reads import LiteStore

    place = Place.of(os.environ)
    if place is None:
        return None
    url = place.store_url()
    if not spoken(url):
        return None
    conn = resp_client.connect(url, timeout=CONNECT_TIMEOUT_S)
    if not isinstance(conn, resp_client.Connection):
        return None  # TLS, a URL this client does not speak
    conn.errors = "strict"
    try:
        return _ANSWER[command](LiteStore(conn, Keys(place.key_prefix)), place, args, opts)
    finally:
        conn.close()


__all__ = ["COMMANDS", "OFF_VAR", "Place", "answer", "parse", "spoken"]
