"""Server memory settings the bus sets where the server allows it (``CONFIG SET``).

On a stock redis-server two defaults cost an idle session most of its memory: a hash
holding one value past 64 bytes (an inbox record, a send answer, a one-message thread)
is a table instead of a listpack (hundreds of bytes more each), and each new stream node is
allocated at 4 KB. The scheduler (``inbox scheduler``, :func:`keep`) sets them at start
and checks them once a minute (a restarted server forgets ``CONFIG SET``), on every node
of a cluster, only where the server still has its default: a value the operator chose
is left as it is. A server that refuses ``CONFIG`` (many managed services, an ACL) keeps
its defaults; ``inbox status`` says so under ``memory_settings``, with what to set by
hand. ``INBOX_MEMORY_SETTINGS=0`` leaves the server alone.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis

from bus.core.models import now_ms
from bus.core.status_view import memory_report

from .cluster import REDIS_ERRORS

if TYPE_CHECKING:
    from .store import Store

log = logging.getLogger(__name__)

CHECK_EVERY_S = 60.0


@dataclass(frozen=True)
class Wanted:
    """One setting: its names (newest first: Redis 7's, then 6.2's), the server's
    default and the bus's value."""

    names: tuple[str, ...]
    default: str
    value: str


WANTED = (
    Wanted(("stream-node-max-bytes",), "4096", "1024"),
    Wanted(("hash-max-listpack-value", "hash-max-ziplist-value"), "64", "1024"),
)


def plan(found: str | None, want: Wanted) -> str:
    """What to do with one setting found at ``found`` (``None``: the server has no such
    setting): ``ok`` (already the bus's value), ``set`` (the default: set it), ``kept``
    (the operator's own value: left), ``unknown``."""
    if found is None:
        return "unknown"
    if found == want.value:
        return "ok"
    if found == want.default:
        return "set"
    return "kept"


def worst(states: list[str]) -> str:
    """One state for a setting over a cluster's nodes: the one that most needs saying."""
    for state in ("refused", "kept", "unknown", "set", "ok"):
        if state in states:
            return state
    return "ok"


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200]


def keep(store: Store, *, enabled: bool = True) -> dict[str, dict[str, Any]]:
    """Check each wanted setting on every node, set it where the default is in force;
    the outcome per setting (also kept in Redis for ``inbox status``)."""
    out: dict[str, dict[str, Any]] = {}
    for want in WANTED:
        name = want.names[0]
        row: dict[str, Any] = {"want": int(want.value)}
        if not enabled:
            out[name] = {**row, "state": "off", "why": "INBOX_MEMORY_SETTINGS=0"}
            continue
        try:
            found = store.server.server_config(want.names)
        except redis.ResponseError as exc:
            out[name] = {
                **row,
                "state": "refused",
                "why": f"the server refuses CONFIG ({_one_line(exc)}); set {name} "
                f"{want.value} in its configuration to save memory",
            }
            continue
        states = [plan(value, want) for value in found]
        try:
            for node, state in enumerate(states):
                if state == "set":
                    store.server.set_server_config(node, want.names, want.value)
        except redis.ResponseError as exc:
            out[name] = {
                **row,
                "state": "refused",
                "why": f"the server refused CONFIG SET ({_one_line(exc)}); set {name} "
                f"{want.value} in its configuration to save memory",
            }
            continue
        state = worst(states)
        row["state"] = state
        row["found"] = sorted({int(v) for v in found if v is not None and v.lstrip("-").isdigit()})
        if state == "kept":
            row["why"] = f"the server's own value is kept; {want.value} saves memory"
        elif state == "unknown":
            row["why"] = "this server has no such setting"
        out[name] = row
    try:
        store.server.keep_memory_report(
            {k: json.dumps({**v, "at": now_ms()}) for k, v in out.items()}
        )
    except REDIS_ERRORS:
        pass
    return out


def report(store: Store) -> dict[str, Any]:
    """The scheduler's last outcome per setting; ``{}`` before its first check."""
    return memory_report(store.server.memory_report())


class Keeper:
    """:func:`keep` at most once per :data:`CHECK_EVERY_S` (the scheduler's loop)."""

    def __init__(self, store: Store, *, enabled: bool = True) -> None:
        self.store = store
        self.enabled = enabled
        self._next = 0.0
        self._said: set[str] = set()

    def __call__(self, now: float) -> None:
        if now < self._next:
            return
        self._next = now + CHECK_EVERY_S
        try:
            out = keep(self.store, enabled=self.enabled)
        except REDIS_ERRORS:
            self._next = now + 1.0
            return
        for name, row in out.items():
            line = f"{name}: {row['state']}"
            if line not in self._said and row["state"] in ("set", "refused", "kept"):
                self._said.add(line)
                log.info("memory setting %s (%s)", line, row.get("why", row["want"]))
