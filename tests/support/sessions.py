"""Sessions set up the way many tests start: a pair that writes to each other, idle
sessions with a blocker waiting, a send from one to the other."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bus.api import Bus


def pair(b: Bus) -> None:
    """Sessions alice and bob, open."""
    b.open_session("alice")
    b.open_session("bob")


def send(b: Bus, to: str = "bob", text: str = "look at the diff", **kw: Any) -> dict[str, Any]:
    """A message from alice's session to ``to``; the send's answer."""
    return b.send({"from": "hosta:alice", "from_session": "alice", "to_id": to, "text": text, **kw})


def idle_with_blockers(b: Bus, sids: list[str]) -> None:
    """Each of ``sids`` opened, through one turn and idle, then sent one blocker (one batch)."""
    for sid in sids:
        b.open_session(sid)
        b.turn(sid, "start")
        b.turn(sid, "end")
    b.send_many(
        [{"from": "hx:peer", "to_id": sid, "text": "blocked", "class": "blocker"} for sid in sids]
    )


def running_with_an_unwritable_floor(b: Bus, sid: str) -> Path:
    """``sid`` open and running, its floor file a folder (every write to it raises
    ``IsADirectoryError``), and an action sent to it: its delivery's notice will fail.
    The floor file's path (remove the folder to make it writable again)."""
    b.open_session(sid)
    b.turn(sid, "start")  # running: its notice is written at once
    floor = b.settings.home / "inbox" / sid / "messages.jsonl"
    floor.unlink(missing_ok=True)
    floor.mkdir(parents=True)
    b.send({"from": "me:sh", "to_id": sid, "text": "x", "class": "action"})
    return floor
