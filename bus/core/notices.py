"""One notice: the batch of new messages a session hears about.

A notice is one ``[inbox ...]`` header plus one indented line per thread. Every line that
carries other parties' words is indented and sanitized, so no message can forge a header.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .text import one_line, reveal_invisible, sanitize_label
from .threads import thread_label

MAX_THREAD_LINES = 20
MAX_SENDERS_SHOWN = 3
PREVIEW_LIMIT = 120


@dataclass
class ThreadSummary:
    """One thread's share of a notice."""

    thread: str
    label: str
    count: int
    senders: list[str] = field(default_factory=list)
    newest_at: int = 0
    newest_preview: str = ""
    blocker: bool = False
    key: str = ""
    # False when any message here came from a sender no token authenticated.
    verified: bool = True
    unverified: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        # As dataclasses.asdict, without its deep copy of every field (a notice a session
        # in a wake burst): the lists are copied, the rest is immutable.
        return {
            "thread": self.thread,
            "label": self.label,
            "count": self.count,
            "senders": list(self.senders),
            "newest_at": self.newest_at,
            "newest_preview": self.newest_preview,
            "blocker": self.blocker,
            "key": self.key,
            "verified": self.verified,
            "unverified": list(self.unverified),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ThreadSummary:
        return cls(
            thread=str(data["thread"]),
            label=str(data.get("label", "")),
            count=int(data.get("count", 0)),
            senders=[str(s) for s in data.get("senders", [])],
            newest_at=int(data.get("newest_at", 0)),
            newest_preview=str(data.get("newest_preview", "")),
            blocker=bool(data.get("blocker", False)),
            key=str(data.get("key", "")),
            verified=data.get("verified") is True,
            unverified=[str(x) for x in data.get("unverified", [])],
        )


def _preview(msg: dict[str, Any]) -> str:
    # Invisible characters shown, not dropped: the preview says what the body holds.
    text = one_line(reveal_invisible(str(msg.get("text") or "")), PREVIEW_LIMIT)
    if text:
        return text
    files = msg.get("files") or []
    names = [str(f.get("name", "?")) for f in files if isinstance(f, dict)]
    # A pictures-only message still needs something to show on its thread line.
    return one_line(f"(files: {', '.join(names)})", PREVIEW_LIMIT) if names else ""


def summarize(messages: list[dict[str, Any]]) -> list[ThreadSummary]:
    """Group wire dicts (with ``thread`` and ``class``) into per-thread summaries,
    in notice order."""
    by_thread: dict[str, ThreadSummary] = {}
    # Stable sort by time: senders come out in order of first appearance.
    for msg in sorted(messages, key=lambda m: int(m.get("ts", 0))):
        thr = str(msg["thread"])
        ts = int(msg.get("ts", 0))
        s = by_thread.get(thr)
        if s is None:
            key = str(msg.get("key") or "")
            label = str(msg.get("label") or (thread_label(key) if key else thr))
            s = by_thread[thr] = ThreadSummary(thread=thr, label=label, count=0, key=key)
        s.count += 1
        sender = str(msg.get("from", ""))
        if sender not in s.senders:
            s.senders.append(sender)
        if ts >= s.newest_at:
            s.newest_at = ts
            s.newest_preview = _preview(msg)
        if msg.get("class") == "blocker":
            s.blocker = True
        if msg.get("verified") is not True:
            s.verified = False
            if sender not in s.unverified:
                s.unverified.append(sender)
    return order(by_thread.values())


def merge(summaries_lists: list[list[ThreadSummary]]) -> list[ThreadSummary]:
    """Several notices as one: counts summed per thread, senders united, the newest
    preview kept, blocker if any was."""
    out: dict[str, ThreadSummary] = {}
    for summaries in summaries_lists:
        for s in summaries:
            m = out.get(s.thread)
            if m is None:
                out[s.thread] = ThreadSummary(
                    **{**s.to_json(), "senders": list(s.senders), "unverified": list(s.unverified)}
                )
                continue
            m.count += s.count
            m.senders.extend(x for x in s.senders if x not in m.senders)
            if s.newest_at >= m.newest_at:
                m.newest_at = s.newest_at
                m.newest_preview = s.newest_preview
            m.blocker = m.blocker or s.blocker
            m.verified = m.verified and s.verified
            m.unverified.extend(x for x in s.unverified if x not in m.unverified)
            m.label = m.label or s.label
            m.key = m.key or s.key
    return order(out.values())


def order(threads: Iterable[ThreadSummary]) -> list[ThreadSummary]:
    """Blocker threads first, then newest first (stable otherwise)."""
    return sorted(threads, key=lambda s: (not s.blocker, -s.newest_at))


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _senders(senders: list[str], unverified: list[str] | None = None) -> str:
    # A sender no token authenticated is marked, as stamps mark it.
    shown = [
        sanitize_label(s) + (" unverified" if unverified and s in unverified else "")
        for s in senders[:MAX_SENDERS_SHOWN]
    ]
    rest = len(senders) - len(shown)
    # Cap the list so one busy thread cannot make a line unbounded.
    return ", ".join(shown) + (f" +{rest} more" if rest > 0 else "")


def render_notice(threads: list[ThreadSummary], session_id: str, *, word: str = "new") -> str:
    """The model-facing text of one notice: a header and one line per thread (``word``:
    what the header calls the messages counted)."""
    ordered = order(threads)
    total = sum(s.count for s in ordered)
    sid = sanitize_label(session_id)
    lines = [
        f"[inbox · {total} {word} in {_plural(len(ordered), 'thread')}"
        f" · read: inbox read {sid} <thread>]"
    ]
    for s in ordered[:MAX_THREAD_LINES]:
        mark = "!" if s.blocker else "·"
        line = (
            f"  {mark} {sanitize_label(s.thread)} · {_senders(s.senders, s.unverified)} ({s.count})"
        )
        # one_line strips control characters and newlines; the line's indent keeps a
        # preview such as "[inbox ..." from passing for a header.
        preview = one_line(s.newest_preview, PREVIEW_LIMIT)
        if preview:
            line += f" · {preview}"
        lines.append(line)
    more = len(ordered) - MAX_THREAD_LINES
    if more > 0:
        lines.append(f"  … and {_plural(more, 'more thread')}")
    return "\n".join(lines)


def notice_line(
    notice_id: str,
    session_id: str,
    threads: list[ThreadSummary],
    message_ids: list[str],
    now_ms: int,
    *,
    bus_host: str = "bus",
) -> dict[str, Any]:
    """The JSON line a notice is written as on the floor or the socket."""
    return {
        "v": 1,
        "id": notice_id,
        "ts": now_ms,
        # The anonymous "<host>:inbox" sender: stamps give it no reply hint.
        "from": f"{bus_host}:inbox",
        "to_id": session_id,
        "kind": "notice",
        "text": render_notice(threads, session_id),
        "notice": {
            "threads": [s.to_json() for s in order(threads)],
            "messages": list(message_ids),
        },
    }


def _notice_threads(line: dict[str, Any]) -> list[ThreadSummary] | None:
    payload = line.get("notice")
    if not isinstance(payload, dict) or not isinstance(payload.get("threads"), list):
        return None
    try:
        return [ThreadSummary.from_json(t) for t in payload["threads"]]
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def repeat_mark(count: int) -> str:
    """The line under a notice that carries ``count`` messages an earlier notice carried
    (a notice sent again after a restart: bus.delivery.said)."""
    return f"  ↻ {_plural(count, 'message')} of these repeated from an earlier notice"


def redelivered_mark(count: int) -> str:
    """The line under a notice that carries ``count`` messages an earlier notice carried
    and that came back after a crash (it may or may not have been heard)."""
    return f"  ↻ {_plural(count, 'message')} of these carried again after a crash (maybe seen)"


def _repeats(line: dict[str, Any]) -> int:
    found = line.get("repeats")
    return len(found) if isinstance(found, list) else 0


def render_drained(lines: list[dict[str, Any]], stamp: Callable[[dict[str, Any]], str]) -> str:
    """A drain's model-facing text: every notice line merged into ONE notice, first (with
    a mark when some of its messages were carried before), then each raw line stamped;
    blocks separated by a blank line."""
    notices: list[list[ThreadSummary]] = []
    session_id = ""
    raw: list[dict[str, Any]] = []
    again = 0
    skipped: list[str] = []
    for line in lines:
        if line.get("kind") == "malformed":
            skipped.append(malformed_text(line))
            continue
        threads = _notice_threads(line) if line.get("kind") == "notice" else None
        if threads is None:
            # Raw messages, and a notice line whose payload is unreadable: stamped, so
            # nothing is lost and nothing unindented gets through.
            raw.append(line)
            continue
        notices.append(threads)
        again += _repeats(line)
        session_id = session_id or str(line.get("to_id", ""))
    blocks: list[str] = []
    if notices:
        text = render_notice(merge(notices), session_id)
        blocks.append(text + "\n" + repeat_mark(again) if again else text)
    blocks.extend(stamp(line) for line in raw)
    blocks.extend(skipped)
    return "\n\n".join(blocks)


def malformed_text(line: dict[str, Any]) -> str:
    """What a drain says of the lines it skipped (its ``malformed`` line): how many, where
    they are kept, and the command that lists them."""
    count = int(line.get("count") or 0)
    kept = one_line(str(line.get("kept") or "malformed.jsonl"), 300)
    return (
        f"[inbox · {_plural(count, 'unreadable line')} skipped on the floor, kept in {kept}"
        " · inbox doctor lists them; inbox threads shows what came]"
    )
