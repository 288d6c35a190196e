"""The store's data migrations, in order (run by bus.ops.upgrade).

Each :class:`Migration` brings the data to its ``version``; several may make one version
step. Each is idempotent (run again after a kill, it finds its work done and does the
rest) and answers one line saying what it did, which ``inbox up`` prints once.

Data version 2 (inbox 0.2.0), from 0.1.0's:

- look-alike handles: a session whose handle is not ASCII is listed under its handle's
  confusable skeleton (``P:{hs:<skeleton>}:skel``), which 0.2.0 checks a new handle
  against; 0.1.0 kept no such index.
- members' folded names: each member's ``workspace:name`` folded (``P:member_folds``),
  which reserves the handles reading as it; 0.1.0 kept none.
- reader subscriptions: a reader's own subscription (MCP, the gateway) was named
  ``<reader>.<name>``; 0.2.0 names it ``<reader>/<name>`` and lists it among the reader's
  (``P:{reader}:rsubs``). Its record and its cursors move to the new name (a cursor
  ``<id>`` becomes ``<id>|<now>``), so the subscription goes on where it was.
- the shared scheduler heartbeat: 0.1.0's schedulers beat under one name
  (``P:beat:scheduler``); 0.2.0's each beat as ``scheduler.<host>``, so the old row would
  read ``down`` forever. It is deleted (a 0.1.0 scheduler still running during a rolling
  upgrade writes it again; ``inbox status`` leaves it out once it stops beating,
  bus.core.status_view.worker_rows).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bus.core import faults
from bus.core.errors import BadInput
from bus.core.ids import is_session_id
from bus.core.settings import SUB_IDLE_S
from bus.core.status_view import SCHEDULER
from bus.store import data_version as dv
from bus.trust.rules import member_fold, skeleton

if TYPE_CHECKING:
    from bus.store.store import Store

# A reader's subscription is used within INBOX_SUB_IDLE_S's default or forgotten; a moved
# one is counted as used at its move.
SUB_IDLE_MS = int(SUB_IDLE_S * 1000)


@dataclass
class Run:
    """What one migration may use: the store, the host, the time, and the lock's renewal
    (called now and then by a long migration; it raises once the lock is lost)."""

    store: Store
    host: str
    now_ms: int
    renew: Callable[[], None]


@dataclass(frozen=True)
class Migration:
    """One step of the store's data: ``run`` does it and says what it did."""

    version: int
    name: str
    run: Callable[[Run], str]


def _names(sids: list[str], most: int = 5) -> str:
    shown = ", ".join(sids[:most])
    return shown + (f" and {len(sids) - most} more" if len(sids) > most else "")


def index_lookalike_handles(run: Run) -> str:
    """List every session whose handle is not ASCII under its handle's skeleton."""
    store, indexed = run.store, []
    for sids in dv.session_ids(store):
        pipe = store.pipeline()
        for sid in sids:
            pipe.hget(store.k.s(sid, "session"), "handle")
        for sid, handle in zip(sids, pipe.execute(), strict=True):
            if not handle or str(handle).isascii():
                continue
            skel = skeleton(str(handle))
            if skel == handle:
                continue
            try:
                store.sessions.index_skeleton(skel, sid)
            except (BadInput, ValueError):
                continue  # a skeleton no key may carry: 0.2.0 refuses such a handle anew
            indexed.append(sid)
        run.renew()
    if not indexed:
        return "no handle reads as another; nothing to index"
    return f"{len(indexed)} handle(s) indexed for look-alikes ({_names(indexed)})"


def index_member_folds(run: Run) -> str:
    """Remember each member's folded ``workspace:name`` (former members' too)."""
    store, done = run.store, []
    for key in dv.scan(store, store.k.members_pattern()):
        workspace = store.k.members_workspace(key)
        if workspace is None or not is_session_id(workspace):
            continue
        for name in sorted(store.members.members(workspace)):
            if not is_session_id(name):
                continue
            store.members.index_member_fold(member_fold(workspace, name), workspace, name)
            done.append(f"{workspace}/{name}")
        run.renew()
    if not done:
        return "no workspace members; nothing to index"
    return f"{len(done)} member name(s) indexed against look-alike handles ({_names(done)})"


def split_reader_sub(name: str, is_session: Callable[[str], bool]) -> tuple[str, str] | None:
    """``(reader, own name)`` of a 0.1.0 reader subscription ``<reader>.<name>``: the
    longest part before a ``.`` that is a registered session (``is_session``), with a
    valid name after it; ``None`` for any other name (a plain durable subscription)."""
    if "/" in name:
        return None
    cut = name.rfind(".")
    while cut > 0:
        reader, own = name[:cut], name[cut + 1 :]
        if is_session_id(own) and is_session_id(reader) and is_session(reader):
            return reader, own
        cut = name.rfind(".", 0, cut)
    return None


def rename_reader_subs(run: Run) -> str:
    """Move each ``<reader>.<name>`` subscription to ``<reader>/<name>``, cursors too."""
    store = run.store
    prefix_len = len(store.k.sub("x")) - 1
    olds = sorted({key[prefix_len:] for key in dv.scan(store, store.k.sub_pattern())})

    def is_session(sid: str) -> bool:
        return store.r.zscore(store.k.sessions, sid) is not None

    renames: dict[str, str] = {}
    for old in olds:
        split = split_reader_sub(old, is_session)
        if split is None:
            continue
        reader, own = split
        renames[old] = store.k.reader_sub(reader, own)
        created = store.r.hget(store.k.sub(old), "created") or run.now_ms
        pipe = store.pipeline()
        pipe.hsetnx(store.k.sub(renames[old]), "created", created)
        pipe.pexpire(store.k.sub(renames[old]), SUB_IDLE_MS)
        pipe.zadd(store.k.reader_subs(reader), {own: run.now_ms}, nx=True)
        pipe.pexpire(store.k.reader_subs(reader), SUB_IDLE_MS)
        pipe.execute()
    if not renames:
        return "no reader subscription named the 0.1.0 way; nothing to rename"
    names = list(renames)
    for sids in dv.session_ids(store):  # every session's cursors, once for all names
        pipe = store.pipeline()
        for sid in sids:
            pipe.hmget(store.k.s(sid, "subs"), names)
        rows = pipe.execute()
        pipe = store.pipeline()
        for sid, cursors in zip(sids, rows, strict=True):
            for old, cursor in zip(names, cursors, strict=True):
                if cursor:
                    at = str(cursor).partition("|")[0]
                    pipe.hsetnx(store.k.s(sid, "subs"), renames[old], f"{at}|{run.now_ms}")
                    pipe.hdel(store.k.s(sid, "subs"), old)
        pipe.execute()
        run.renew()
    faults.point("upgrade:after_cursors")
    # Last: a kill before this leaves the old names to be found and moved again.
    pipe = store.pipeline()
    for old in names:
        pipe.delete(store.k.sub(old))  # one key a call: they sit in different slots
    pipe.execute()
    moved = [f"{old} -> {new}" for old, new in renames.items()]
    return f"{len(moved)} reader subscription(s) renamed, cursors kept ({_names(moved)})"


def drop_shared_scheduler_beat(run: Run) -> str:
    """Delete the heartbeat 0.1.0's schedulers shared (``P:beat:scheduler``)."""
    if not run.store.schedule.drop_beat(SCHEDULER):
        return "no shared scheduler heartbeat; nothing to delete"
    return (
        "the shared scheduler heartbeat of 0.1.0 deleted (each host's scheduler beats as its own)"
    )


MIGRATIONS: tuple[Migration, ...] = (
    Migration(2, "look-alike handles", index_lookalike_handles),
    Migration(2, "member names", index_member_folds),
    Migration(2, "reader subscriptions", rename_reader_subs),
    Migration(2, "shared scheduler heartbeat", drop_shared_scheduler_beat),
)

__all__ = ["MIGRATIONS", "Migration", "Run", "split_reader_sub"]
