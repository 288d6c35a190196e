"""The stamp: what the model sees for one raw message (as prox renders it).

::

    [inbox from neo:sip · 2026-09-23 17:58 · reply: inbox send --to neo:sip]
      │ look at the diff

The header is built only from sanitised parts and every body line sits under ``│``, so
nothing a sender writes can pass for a second header.
"""

from __future__ import annotations

import time
from datetime import datetime, tzinfo
from typing import Any

from .text import BAR, indent_body, one_line, sanitize_label

SEP = " · "
# Senders that could not be identified fall back to <host>:prox (prox) or <host>:inbox.
ANONYMOUS_NAMES = ("prox", "inbox")


def _moment(msg: dict[str, Any], now_ms: int | None, tz: tzinfo | None) -> str:
    ts = msg.get("ts")
    if isinstance(ts, bool) or not isinstance(ts, (int, float)):
        ts = now_ms if now_ms is not None else time.time() * 1000
    try:
        when = datetime.fromtimestamp(ts / 1000, tz=tz)
    except (OverflowError, OSError, ValueError):
        # A nonsense ts is the sender's problem; show when we read it instead.
        fallback = now_ms if now_ms is not None else time.time() * 1000
        when = datetime.fromtimestamp(fallback / 1000, tz=tz)
    if tz is None:
        when = when.astimezone()  # the receiver's local zone
    return when.strftime("%Y-%m-%d %H:%M")


def _label(raw: str) -> str:
    # Also drop the header's own separators, so a label cannot fake "· urgent" or a time.
    cleaned = sanitize_label(raw).replace("·", " ").replace(BAR, " ")
    return " ".join(cleaned.split()) or "unknown"


def is_anonymous(label: str) -> bool:
    """True for the fallback senders ``<host>:prox`` / ``<host>:inbox`` (no reply hint)."""
    host, sep, name = label.rpartition(":")
    return bool(sep) and bool(host) and ":" not in host and name in ANONYMOUS_NAMES


def render_stamp(
    msg: dict[str, Any],
    *,
    now_ms: int | None = None,
    tz: tzinfo | None = None,
    verified: bool | None = None,
) -> str:
    """Render one raw message as ``[inbox from …]`` plus its body under ``│``.

    ``tz`` defaults to the local zone; ``now_ms`` only fills in for a line without
    ``ts``. ``verified`` overrides the line's own ``verified``; only an explicit
    ``False`` marks the sender ``unverified``.
    """
    raw_from = msg.get("from")
    label = _label(raw_from if isinstance(raw_from, str) else "unknown")
    trust = msg.get("verified") if verified is None else verified
    parts = [f"[inbox from {label}"]
    if trust is False:
        parts.append("unverified")
    parts.append(_moment(msg, now_ms, tz))
    if msg.get("kind") == "retraction":
        parts.append("retracted")
        msg_id = msg.get("id")
        body = "(withdrawn by sender)"
        if isinstance(msg_id, str) and msg_id:
            body += " " + one_line(msg_id, 128)
        return SEP.join(parts) + "]\n" + indent_body(body)
    if msg.get("urgency") == "urgent":
        parts.append("urgent")
    if label != "unknown" and not is_anonymous(label):
        parts.append(f"reply: inbox send --to {label}")
    text = msg.get("text")
    body = text if isinstance(text, str) else ""
    files = msg.get("files")
    if isinstance(files, list) and files:
        names = [
            one_line(" ".join(str(f.get("name", "?")).split()), 80) if isinstance(f, dict) else "?"
            for f in files
        ]
        body = (body + "\n" if body else "") + "(attached: " + ", ".join(names) + ")"
    return SEP.join(parts) + "]\n" + indent_body(body)
