"""Thread keying: which thread a message belongs to, and its stable id.

Pure functions: the same receiver and key always give the same ``thr_`` id, so a restart,
another worker or another host files a message in the same thread without coordination.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import re

# Not ``typing.TYPE_CHECKING``: importing typing alone costs the read lane several ms
# (bus.lanes.read imports this module).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# The PR a first line names: "#123", "PR 123", "PR #123", "pr-123", "pull/123".
# Case-insensitive; the leftmost match on the first non-blank line wins. Digits must end
# at a word boundary so "#12abc" (a colour, a hash) is not read as PR 12.
_PR_RE = re.compile(
    r"(?:\bpr[\s#-]*|\bpull/|#)([1-9][0-9]{0,9})\b",
    re.IGNORECASE,
)
_FROM_PR_SEP = "#pr:"


def first_line(text: str) -> str:
    """The first non-blank line of ``text``, stripped ("" if none)."""
    for ln in text.splitlines():
        if ln.strip():
            return ln.strip()
    return ""


def pr_in_first_line(text: str) -> int | None:
    """The PR number the first non-blank line names, if any."""
    m = _PR_RE.search(first_line(text))
    return int(m.group(1)) if m else None


def thread_key(
    *, thread: str | None, pr: int | None, topic: str | None, sender: str, text: str
) -> str:
    """The thread key, in this order: explicit thread, pr, topic, sender + PR named in
    the first line, sender alone."""
    if thread:
        return f"thread:{thread}"
    if pr is not None:
        return f"pr:{pr}"
    if topic:
        return f"topic:{topic}"
    named = pr_in_first_line(text)
    if named is not None:
        return f"from:{sender}{_FROM_PR_SEP}{named}"
    return f"from:{sender}"


# Cached: a stored record is kept without its thread's id (bus.store.packing), so every reader
# computes it again, three times a message on the delivery path, and a batched send once
# a message (bus.services.send_many); the inputs are short. Sized past a swarm's working set (500
# sessions x 13 senders is 6,500 pairs): an LRU smaller than the pairs cycled through
# misses every time.
@functools.lru_cache(maxsize=16384)
def thread_id(receiver: str, key: str) -> str:
    """``thr_`` + base32 of sha256(receiver, key)[:10]; a ``thread:`` key keeps its id
    (a reply stays in the thread it answers)."""
    if key.startswith("thread:"):
        return key[len("thread:") :]
    digest = hashlib.sha256(f"{receiver}\n{key}".encode()).digest()[:10]
    # 10 bytes = 80 bits = exactly 16 base32 characters, so there is never padding.
    return "thr_" + base64.b32encode(digest).decode("ascii").lower().rstrip("=")


def thread_label(key: str) -> str:
    """A human label for a key: ``PR #123``, ``topic <t>``, ``<sender> · PR #123``,
    ``<sender>``, or the thread id."""
    if key.startswith("thread:"):
        return key[len("thread:") :]
    if key.startswith("pr:"):
        return f"PR #{key[3:]}"
    if key.startswith("topic:"):
        return f"topic {key[6:]}"
    if key.startswith("from:"):
        sender = key[5:]
        # rpartition: a handle may itself contain "#pr:"; only a numeric tail is the PR.
        head, sep, tail = sender.rpartition(_FROM_PR_SEP)
        if sep and tail.isdigit():
            return f"{head} · PR #{tail}"
        return sender
    return key


def thread_of(receiver: str, msg: dict[str, Any]) -> tuple[str, str]:
    """``(key, thread id)`` of a wire message for ``receiver``: the one place the send's
    answer, the inbox and a withdrawal's notice compute it, so they always agree."""
    key = thread_key(
        thread=msg.get("thread"),
        pr=msg.get("pr"),
        topic=msg.get("topic"),
        sender=str(msg["from"]),
        text=str(msg.get("text") or ""),
    )
    return key, thread_id(receiver, key)
