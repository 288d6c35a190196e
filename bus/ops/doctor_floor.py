"""``inbox doctor``'s floor check: lines a drain could not read and kept aside.

A drain skips a torn or malformed line (a harness that died mid-write, a hand edit) and
keeps it in the session's ``malformed.jsonl``, never dropped (bus.delivery.floor). The
doctor lists each session that has such lines, how many, the newest, and what to do.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bus.delivery.floor import MALFORMED

EFFECT = "has lines on its floor that no drain could read"
_SHOWN = 3
_RAW_SHOWN = 200


def malformed_problems(home: Path, sids: list[str]) -> list[dict[str, Any]]:
    """One problem per session of ``sids`` whose ``malformed.jsonl`` holds lines."""
    out = []
    for sid in sids:
        path = home / "inbox" / sid / MALFORMED
        try:
            raw = path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as exc:
            raw = f'{{"raw": "unreadable: {exc}"}}\n'.encode()
        lines = [x for x in raw.split(b"\n") if x.strip()]
        if not lines:
            continue
        out.append(
            {
                "session": sid,
                "check": "malformed",
                "effect": EFFECT,
                "count": len(lines),
                "kept": str(path),
                "newest": [_raw_of(x) for x in lines[-_SHOWN:]],
                "reason": f"{len(lines)} torn or malformed line(s) were skipped by a drain",
                "fix": (
                    f"read them in {path} (what a message said is in `inbox threads {sid}`), "
                    "then remove the file"
                ),
            }
        )
    return out


def _raw_of(line: bytes) -> str:
    try:
        kept = json.loads(line)
    except ValueError:
        return line.decode("utf-8", "replace")[:_RAW_SHOWN]
    raw = kept.get("raw") if isinstance(kept, dict) else None
    return str(raw if raw is not None else kept)[:_RAW_SHOWN]


__all__ = ["EFFECT", "malformed_problems"]
