"""A session's life follows its harness's: the host's worker closes a session whose
holders all ended, without waiting for a wake.

A harness's hooks keep the processes whose life is the session's (``holders``, each a pid
and its start time: :func:`bus.delivery.kept_wake.keep_holders`); Codex's windows under its
background server are the case, where quitting a window runs no ``SessionEnd``.
:class:`HolderWatch` looks at them every :data:`EVERY_S` on the worker's host: a ``stat``
of each session folder's ``holders`` file (read again only when it changed) and, per
holder, whether its pid still names the process started then. Nothing goes to Redis while
a holder lives. When none does, the session's record is read once: a session open on this
host and not seen (open, turn, drain) since the look began is closed as a wake would close
it (:meth:`bus.delivery.notice.Notices.close_gone`: ``session_gone`` in its events, the
senders waiting on it answered). A session already closed, gone from Redis, or of another
host is left alone and not read again while its ``holders`` file stays as it is (it stays:
the MCP server tells a quit window's session by it, bus.surfaces.harness.link).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from bus.core.ids import is_session_id
from bus.core.models import SessionInfo, now_ms
from bus.store.outage_log import waits_out

from . import kept_wake

if TYPE_CHECKING:
    from .floor import Floor
    from .notice import Notices

log = logging.getLogger(__name__)

# How often the worker looks (as often as its heartbeat beats).
EVERY_S = 2.0

Verdict = Literal["close", "settled", "later"]


def verdict(info: SessionInfo | None, host: str, looked_at: int) -> Verdict:
    """What to do with a session whose holders all ended, by its record: ``close`` it,
    leave it ``settled`` (nothing to close: gone, closed, another host's), or look again
    ``later`` (its harness was seen since ``looked_at``, ms: a new window opened it)."""
    if info is None or info.state == "closed" or info.host != host:
        return "settled"
    if max(info.last_seen, info.opened_at) >= looked_at:
        return "later"
    return "close"


@dataclass
class _Seen:
    stamp: tuple[int, int, int]  # the holders file's (inode, mtime ns, size)
    holders: list[tuple[int, float]]
    settled: bool = False  # gone, and its record needs nothing more


class HolderWatch:
    """Closes this host's sessions whose kept holders all ended (module docstring)."""

    def __init__(
        self,
        floor: Floor,
        host: str,
        close: Callable[[str], None],
        read: Callable[[str], SessionInfo | None],
        alive: Callable[[int, float], bool] = kept_wake.alive,
    ) -> None:
        self.floor, self.host = floor, host
        self._close, self._read, self._alive = close, read, alive
        self._seen: dict[str, _Seen] = {}
        self._stop = threading.Event()

    @classmethod
    def of(cls, notices: Notices) -> HolderWatch:
        """The watch over ``notices``' floor on its host, closing through it."""
        return cls(
            notices.floor,
            notices.settings.host,
            notices.close_gone,
            lambda sid: notices.store.sessions.get_session(sid),
        )

    def check(self) -> list[str]:
        """One look: the sessions closed now."""
        looked_at = now_ms()
        closed: list[str] = []
        present: set[str] = set()
        for sid, path in self._holder_files():
            try:
                st = os.stat(path)
            except OSError:
                continue
            present.add(sid)
            seen = self._load(sid, path, (st.st_ino, st.st_mtime_ns, st.st_size))
            if seen is None or seen.settled or not seen.holders:
                continue
            if any(self._alive(pid, started) for pid, started in seen.holders):
                continue
            try:
                what = verdict(self._read(sid), self.host, looked_at)
                if what == "close":
                    if not self._unchanged(path, seen):
                        continue
                    self._close(sid)
                    closed.append(sid)
            except Exception as exc:
                if not waits_out(exc):
                    raise
                # Redis away or refusing writes (the worker's log says so): the next look
                # tries again.
                log.debug("holders of %s: the store did not answer: %s", sid, exc)
                continue
            seen.settled = what != "later"
        for sid in set(self._seen) - present:
            del self._seen[sid]
        return closed

    def _holder_files(self) -> list[tuple[str, str]]:
        root = self.floor.home / "inbox"
        try:
            entries = list(os.scandir(root))
        except OSError:
            return []
        return [
            (e.name, os.path.join(e.path, kept_wake.HOLDERS_FILE))
            for e in entries
            if is_session_id(e.name) and e.name not in (".", "..")
        ]

    def _load(self, sid: str, path: str, stamp: tuple[int, int, int]) -> _Seen | None:
        seen = self._seen.get(sid)
        if seen is not None and seen.stamp == stamp:
            return seen
        try:
            with open(path, encoding="utf-8") as fh:
                holders = [(int(p), float(t)) for p, t in json.loads(fh.read(kept_wake.MAX_BYTES))]
        except (OSError, ValueError, TypeError):
            holders = []  # unreadable or not holders: nothing to judge by (kept_wake too)
        self._seen[sid] = seen = _Seen(stamp, holders)
        return seen

    def _unchanged(self, path: str, seen: _Seen) -> bool:
        # A window that opened the session anew while its record was read kept new
        # holders: judged at the next look, by them.
        try:
            st = os.stat(path)
        except OSError:
            return False
        return (st.st_ino, st.st_mtime_ns, st.st_size) == seen.stamp

    def start(self, every_s: float = EVERY_S) -> HolderWatch:
        """Look every ``every_s`` in a background thread until :meth:`stop`."""

        def loop() -> None:
            while not self._stop.wait(every_s):
                try:
                    self.check()
                except Exception:  # a look that failed is retried at the next
                    log.exception("looking at the sessions' holders failed")

        threading.Thread(target=loop, name="holder-watch", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()


__all__ = ["EVERY_S", "HolderWatch", "verdict"]
