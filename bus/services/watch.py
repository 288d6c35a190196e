"""The coordinator's views: ``inbox watch`` (messages live) and ``inbox top`` (sessions).

:meth:`Watch.subscribe` follows sessions' streams (``P:{sid}:stream``, one entry per message
addressed to the session) with a blocking ``XREAD``: one call over every followed
stream, so one round trip per ``block_ms`` at most, however many sessions.

Redis Cluster: each session's stream has its own hash tag, so a multi-key ``XREAD``
would be refused there (CROSSSLOT); :func:`bus.store.cluster.read_streams` reads each stream
on its own, pipelined per node, polling every 50 ms instead of blocking.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import IO, TYPE_CHECKING, Any

from bus.core.errors import Refused, Unauthorized
from bus.core.models import check_session_id, now_ms
from bus.core.settings import SUB_IDLE_S
from bus.core.status_view import HOST_DOWN_S
from bus.store.cluster import Poll
from bus.trust.tokens import SCOPE_READ

from .durable_watch import (
    ClaimsOf,
    Durable,
    check_readable,
    lanes,
    reader_of,
    reader_subscription,
    resolve,
    visible,
)

if TYPE_CHECKING:
    from rich.table import Table

    from bus.store.store import Store

UNREAD_MARKS = ("new", "noticed")


class Subscription:
    """Stream positions for a set of sessions; iterating reads them live (see subscribe)."""

    def __init__(
        self,
        store: Store,
        blocking: Any,
        sessions: list[str] | None,
        *,
        block_ms: int,
        since: str,
        stop: threading.Event | None,
        refresh_s: float,
        count: int,
        lanes_of: list[str] | None = None,
        reader: str | None = None,
    ) -> None:
        if block_ms <= 0:
            raise ValueError("block_ms must be positive (0 would block forever)")
        self.store, self.blocking = store, blocking
        # A reader's watch hands over what its durable subscription would (visible()).
        self.reader = reader
        self.full: set[str] = set()
        self.follow_all = sessions is None and not lanes_of
        self.lanes_of = lanes_of or []
        self.block_ms = block_ms
        self.since = since
        self.stop = stop or threading.Event()
        self.refresh_s = refresh_s
        self.count = count
        self.pos: dict[str, str] = {}  # session id -> the last stream id handed over
        self.poll = Poll()  # the wait between reads on a cluster, kept across them
        named = [] if sessions is None and lanes_of else sessions
        for sid in resolve(self.store, named, self.lanes_of, named is None and not self.lanes_of):
            self.follow(check_session_id(sid), newcomer=False)
        self.read_lanes()

    def read_lanes(self) -> None:
        """The reader's own lanes, read once for the sessions just followed (two round
        trips, not two a session)."""
        if self.reader is not None:
            self.full = {self.reader, *self.store.sessions.lanes_of(self.reader)}

    def follow(self, sid: str, *, newcomer: bool) -> bool:
        """Follow ``sid`` from now (``newcomer``: from its start); whether it is new."""
        if sid in self.pos:
            return False
        if self.since != "$":
            self.pos[sid] = self.since
        else:
            # A session first seen after the start has nothing older than the start.
            self.pos[sid] = "0-0" if newcomer else self.store.queue.last_stream_id(sid)
        return True

    def __iter__(self) -> Iterator[dict[str, Any]]:
        next_refresh = time.monotonic() + self.refresh_s
        while not self.stop.is_set():
            if (self.follow_all or self.lanes_of) and time.monotonic() >= next_refresh:
                found = self.store.sessions.session_ids() if self.follow_all else []
                for owner in self.lanes_of:
                    found += lanes(self.store, owner)
                newcomers = [sid for sid in found if self.follow(sid, newcomer=True)]
                if newcomers:
                    self.read_lanes()
                next_refresh = time.monotonic() + self.refresh_s
            if not self.pos:
                self.stop.wait(self.block_ms / 1000)
                continue
            # A copy: positions move while the caller handles the batch. The blocking
            # client's read timeout outlasts a block: block_ms bounds each read.
            rows = self.store.events.read_session_streams(
                self.blocking,
                dict(self.pos),
                stream="stream",
                count=self.count,
                block_ms=self.block_ms,
                stop=self.stop,
                poll=self.poll,
            )
            for sid, entries in rows:
                for eid, fields in entries:
                    self.pos[sid] = str(eid)
                    try:
                        message = json.loads(fields["m"])
                    except (KeyError, ValueError):
                        message = {"raw": fields}
                    if self.reader is not None and not visible(
                        self.reader, self.full, sid, message
                    ):
                        continue
                    yield {"session": sid, "stream_id": str(eid), "message": message}
                    if self.stop.is_set():
                        return


class Watch:
    """The coordinator's views on one store (a provider, called on use) and a client that
    may block (a provider too): live streams, durable subscriptions, the session table.
    ``claims`` verifies a reader's token (:meth:`bus.trust.access.Access.claims`)."""

    def __init__(
        self,
        store: Callable[[], Store],
        blocking: Callable[[], Any],
        *,
        claims: ClaimsOf,
        sub_max: int = 16,
        sub_idle_s: float = SUB_IDLE_S,
        host_down_s: float = HOST_DOWN_S,
    ) -> None:
        self._store, self._blocking, self.claims = store, blocking, claims
        self.host_down_s = host_down_s  # INBOX_HOST_DOWN_S: top marks a session's host down
        # A reader's own subscriptions: how many at most, and when an unused one is
        # forgotten (INBOX_SUB_MAX, INBOX_SUB_IDLE_S).
        self.sub_max, self.sub_idle_s = sub_max, sub_idle_s

    @property
    def store(self) -> Store:
        return self._store()

    def subscribe(
        self,
        sessions: list[str] | None,
        *,
        block_ms: int = 1000,
        since: str = "$",
        stop: threading.Event | None = None,
        refresh_s: float = 3.0,
        count: int = 500,
        lanes_of: list[str] | None = None,
        reader: str | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Follow ``sessions`` (``None``: all, newcomers found every ``refresh_s``) live, and
        the lanes of each of ``lanes_of`` (the sessions it started or gave work to; new ones
        found every ``refresh_s`` too).

        Yields ``{"session", "stream_id", "message"}`` in stream order per session. ``since``
        is ``$`` (only what arrives after this call), ``0-0`` (everything still in the
        streams) or a stream id. Start positions are taken here, eagerly, so a send made
        after this call returns is never missed even if iteration starts later. ``stop``
        ends the iteration; it is checked between reads, so ``block_ms`` bounds the latency.
        ``reader``: only what that session may read is handed over
        (:func:`bus.services.durable_watch.visible`; the caller checked what it follows).
        """
        sub = Subscription(
            self.store,
            self._blocking(),
            sessions,
            block_ms=block_ms,
            since=since,
            stop=stop,
            refresh_s=refresh_s,
            count=count,
            lanes_of=lanes_of,
            reader=reader,
        )
        return iter(sub)

    def durable(self, name: str, **kw: Any) -> Durable:
        """The durable subscription ``name`` (:class:`bus.services.durable_watch.Durable`);
        its cursors marked used as it reads, so ``INBOX_SUB_IDLE_S`` counts from its last
        run."""
        kw.setdefault("idle_ms", int(self.sub_idle_s * 1000))
        return Durable(self.store, self._blocking(), name, **kw)

    def reader_subscription(self, reader: str, name: str, **kw: Any) -> Durable:
        """A reader's own durable subscription
        (:func:`bus.services.durable_watch.reader_subscription`)."""
        kw.setdefault("most", self.sub_max)
        kw.setdefault("idle_s", self.sub_idle_s)
        return reader_subscription(self.store, self._blocking(), reader, name, **kw)

    def reader(self, token: str | None, by: str | None) -> str:
        """Who reads: the token's session (authentication on), else ``by``."""
        return reader_of(self.claims, token, by)

    def caller_reader(self, sessions: list[str] | None, lanes_of: list[str] | None) -> str | None:
        """Who a watch reads as: None (everything) with authentication off or an
        operator's token; else the token's session, after checking that it follows only
        itself and its lanes (:func:`~bus.services.durable_watch.check_readable`; every
        session is an operator's view). Refused otherwise: nothing is read."""
        claims = self.claims(None, SCOPE_READ)
        if claims is None or claims.sub_kind == "operator":
            return None
        if claims.sub_kind != "session":
            raise Unauthorized(
                f"the token is {claims.actor}'s, not a session's nor an operator's",
                code="token_subject",
            )
        reader = str(claims.sub)
        if sessions is None and not lanes_of:
            raise Refused(
                f"{reader!r} may follow itself and its lanes, not every session "
                "(--all needs an operator's token)",
                code="not_your_lane",
            )
        check_readable(self.store, reader, sessions or [], lanes_of or [])
        return reader

    def open_for_reader(self, token: str | None, by: str | None, name: str, **kw: Any) -> Durable:
        """The gateway's ``GET /v1/watch``: the reader (token, else ``by``) and its own
        durable subscription (:meth:`reader_subscription`)."""
        return self.reader_subscription(self.reader(token, by), name, **kw)

    def run_watch(
        self,
        sessions: list[str] | None,
        out: IO[str] | None = None,
        *,
        since: str = "$",
        stop: threading.Event | None = None,
        block_ms: int = 1000,
        lanes_of: list[str] | None = None,
        name: str | None = None,
        reset: bool = False,
    ) -> None:
        """Print one JSON line per message until ``stop`` is set or Ctrl-C; with ``name``, as
        the durable subscription of that name (bus.services.durable_watch: each line
        acknowledged once written). With authentication on, the caller's token (a
        session's) reads as that session, live or durable alike: itself and its lanes
        only, and of a session it only gave work to, its own messages
        (:meth:`caller_reader`)."""
        out = out or sys.stdout
        reader = self.caller_reader(sessions, lanes_of)
        if name is not None:
            self._run_durable(name, out, sessions, lanes_of, stop, block_ms, reset, reader)
            return
        try:
            for event in self.subscribe(
                sessions,
                since=since,
                stop=stop,
                block_ms=block_ms,
                lanes_of=lanes_of,
                reader=reader,
            ):
                out.write(json.dumps(event, ensure_ascii=False) + "\n")
                out.flush()
        except KeyboardInterrupt:
            pass

    def _run_durable(
        self,
        name: str,
        out: IO[str],
        sessions: list[str] | None,
        lanes_of: list[str] | None,
        stop: threading.Event | None,
        block_ms: int,
        reset: bool,
        reader: str | None = None,
    ) -> None:
        """The durable subscription's lines. Once it was opened, Redis going away (a
        restart, a cluster's failover, a partition) does not end it: one line on stderr,
        then it opens again at its cursors every second until Redis answers (nothing
        missed). Redis away before the first opening is the caller's error to report."""
        from bus.store.outage_log import FAILOVER_ERRORS

        stop = stop or threading.Event()
        opened, away_since = False, 0.0
        while not stop.is_set():
            try:
                durable = self.durable(
                    name,
                    sessions=sessions,
                    lanes_of=lanes_of,
                    follow_all=sessions is None and not lanes_of,
                    block_ms=block_ms,
                    stop=stop,
                    reset=reset and not opened,
                    reader=reader,
                )
                if away_since:
                    took = time.monotonic() - away_since
                    sys.stderr.write(f"inbox watch: Redis back after {took:.1f} s; resumed\n")
                    away_since = 0.0
                opened = True
                for event in durable:
                    out.write(json.dumps(event, ensure_ascii=False) + "\n")
                    out.flush()
                    durable.ack(event)
                return
            except KeyboardInterrupt:
                return
            except FAILOVER_ERRORS as exc:
                if not opened:
                    raise
                if not away_since:
                    away_since = time.monotonic()
                    first = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
                    sys.stderr.write(
                        f"inbox watch: Redis unreachable ({first}); resuming {name!r} at its "
                        "cursors once it answers\n"
                    )
                stop.wait(1.0)

    def top_rows(self) -> list[dict[str, Any]]:
        """One row per session: handle, host, ``host_state`` (``up``, ``starting``,
        ``down``, ``unseen``: bus.core.status_view.beat_state), state, turns, unread, new, backlog, age, and ``last_at`` (ms of its
        last message or session change)."""
        from bus.core.status_view import host_state

        store = self.store
        infos = store.sessions.sessions()
        now = now_ms()
        hosts = sorted({i.host for i in infos})
        host_states = {
            h: host_state(at, now, self.host_down_s)
            for h, at in zip(hosts, store.schedule.beats_at(hosts), strict=True)
        }
        rows = []
        for info, (marks, last_ms) in zip(
            infos, store.inbox.marks_and_last_arrival([i.session for i in infos]), strict=True
        ):
            rows.append(
                {
                    "session": info.session,
                    "handle": info.handle,
                    "host": info.host,
                    "host_state": host_states[info.host],
                    "state": info.state,
                    "turns": info.turns,
                    "unread": sum(1 for m in marks if m in UNREAD_MARKS),
                    "new": sum(1 for m in marks if m == "new"),
                    "backlog": store.queue.backlog(info.session),
                    "age_s": max(0, round((now - info.opened_at) / 1000))
                    if info.opened_at
                    else None,
                    "last_at": max(info.updated_at, last_ms),
                }
            )
        return rows

    def run_top(self, interval: float = 1.0, *, stop: threading.Event | None = None) -> None:
        """Redraw the table every ``interval`` seconds until ``stop`` is set or Ctrl-C."""
        from rich.live import Live

        stop = stop or threading.Event()
        try:
            with Live(render_top(self.top_rows()), auto_refresh=False) as live:
                while not stop.wait(interval):
                    live.update(render_top(self.top_rows()), refresh=True)
        except KeyboardInterrupt:
            pass


def _age(seconds: int | None) -> str:
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


STATE_STYLE = {"running": "green", "idle": "", "closing": "yellow", "closed": "dim"}


def render_top(rows: list[dict[str, Any]]) -> Table:
    """A rich table of :func:`top_rows`; unread and backlog stand out when non-zero."""
    from rich.table import Table

    table = Table(title="inbox top", expand=False)
    for name, justify in (
        ("session", "left"),
        ("handle", "left"),
        ("host", "left"),
        ("state", "left"),
        ("turns", "right"),
        ("unread", "right"),
        ("new", "right"),
        ("backlog", "right"),
        ("age", "right"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for row in rows:
        table.add_row(
            row["session"],
            row["handle"],
            _host_cell(row, "[red]{} ({})[/]"),
            row["state"],
            str(row["turns"]),
            f"[bold]{row['unread']}[/]" if row["unread"] else "0",
            str(row["new"]),
            f"[bold red]{row['backlog']}[/]" if row["backlog"] else "0",
            _age(row["age_s"]),
            style=STATE_STYLE.get(row["state"], ""),
        )
    return table


TOP_COLUMNS = ("session", "handle", "host", "state", "turns", "unread", "new", "backlog", "age")


def _host_cell(row: dict[str, Any], mark: str) -> str:
    """A row's host, marked by ``mark`` (a format of the host and its state) when no
    worker of it beats (``down``, ``starting``, ``unseen``)."""
    host, state = str(row["host"]), row.get("host_state")
    return mark.format(host, state) if state not in (None, "up") else host


def plain_top(rows: list[dict[str, Any]]) -> str:
    """:func:`top_rows` as a plain text table (for a pipe or a file: no terminal codes)."""
    cells = [list(TOP_COLUMNS)] + [
        [_host_cell(r, "{} ({})") if c == "host" else str(r[c]) for c in TOP_COLUMNS[:-1]]
        + [_age(r["age_s"])]
        for r in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(TOP_COLUMNS))]
    left = 4  # session, handle, host, state read left to right; counts line up right
    return "\n".join(
        "  ".join(
            c.ljust(w) if i < left else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in cells
    )
