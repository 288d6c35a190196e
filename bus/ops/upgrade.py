"""Upgrading the store's data: ordered migrations, run by ``inbox up`` and ``inbox upgrade``.

Each change to what the store keeps raises the data version (bus.store.data_version) and
adds its migrations here, in order. :func:`upgrade` runs those past the store's version
under one lock (``P:data:lock``: one host at a time; the others wait for it, then find
the work done), says once on the console what each did, and stamps the version after the
last migration of each step. Every migration is idempotent, so one killed half-way is
run again whole by the next ``inbox up``: a step's version is stamped only once all of
it ran. Other hosts may run meanwhile: a migration only adds to indexes, or copies a
record to its new name before it drops the old one.

What needs a person's consent is not migrated: a wake command 0.1.0 kept in the session's
record only (bus.core.wake_consent) is named by :func:`wake_consents`, every time this
host's ``inbox up`` starts, until a person keeps it on the host.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bus.core.errors import Refused, Unavailable
from bus.core.models import now_ms
from bus.core.version import __version__
from bus.core.wake_consent import EFFECT, wake_off
from bus.store import data_version as dv

from .migrations import MIGRATIONS, Migration, Run

if TYPE_CHECKING:
    from bus.core.settings import Settings
    from bus.store.store import Store

Say = Callable[[str], None]
# A worker's exit when the store's data is newer than its code (beside the host floor's 5, 6).
EXIT_DATA_TOO_NEW = 7
# How long a host waits for another host's upgrade of the same store.
WAIT_S = 120.0
POLL_S = 0.2


class DataTooNew(Refused):
    """The store's data was written by a newer release than this host runs."""

    def __init__(self, fields: dict[str, str]) -> None:
        stored = dv.version_of(fields)
        need = dv.needed_release(fields)
        super().__init__(
            f"the store's data is version {stored}, written by inbox {need}; this host runs "
            f"inbox {__version__} (data version {dv.DATA_VERSION}) and does not read it: "
            f"upgrade this host to inbox {need} or later (docs/operations/upgrading.md)",
            code="data_too_new",
        )
        self.stored = stored
        self.needed = need


def check_readable(store: Store) -> dict[str, str]:
    """``P:data``'s fields when this code reads the store's data; :class:`DataTooNew`
    otherwise (a host older than the data refuses to start)."""
    fields = dv.read(store)
    if dv.too_new(dv.version_of(fields)):
        raise DataTooNew(fields)
    return fields


def pending(stored: int, migrations: tuple[Migration, ...] = MIGRATIONS) -> list[Migration]:
    """The migrations past data version ``stored``, in order (pure)."""
    return [m for m in migrations if m.version > stored]


def upgrade(
    store: Store,
    host: str,
    say: Say,
    *,
    wait_s: float = WAIT_S,
    migrations: tuple[Migration, ...] = MIGRATIONS,
) -> dict[str, Any]:
    """Bring the store's data to :data:`~bus.store.data_version.DATA_VERSION`.

    Answers ``{"ok", "version", "was", "ran": [{"migration", "version", "did"}]}``;
    refuses :class:`DataTooNew` (the data is newer than this code) and
    ``upgrade_busy`` (another host held the lock past ``wait_s``)."""
    deadline = time.monotonic() + wait_s
    waiting = False
    while True:
        fields = check_readable(store)
        stored = dv.version_of(fields)
        if stored == dv.DATA_VERSION:
            return {"ok": True, "version": stored, "was": stored, "ran": []}
        token = dv.take_lock(store)
        if token is not None:
            break
        if not waiting:
            waiting = True
            say(
                f"inbox upgrade: another host is upgrading the store's data (or one killed "
                f"doing it holds the lock for up to {dv.LOCK_TTL_MS // 1000} s); waiting"
            )
        if time.monotonic() >= deadline:
            raise Refused(
                f"another host has been upgrading the store's data for {wait_s:g} s; "
                "run `inbox upgrade` again once it is done",
                code="upgrade_busy",
            )
        time.sleep(POLL_S)  # the holder releases the lock or its TTL ends it
    try:
        return _run(store, host, say, token, migrations)
    finally:
        dv.release_lock(store, token)


def _run(
    store: Store, host: str, say: Say, token: str, migrations: tuple[Migration, ...]
) -> dict[str, Any]:
    fields = check_readable(store)  # read again under the lock: another host may be done
    stored = dv.version_of(fields)
    if stored is None and dv.is_new(store):
        dv.stamp(store, dv.DATA_VERSION, __version__, host, now_ms())
        return {"ok": True, "version": dv.DATA_VERSION, "was": None, "ran": []}
    was = stored if stored is not None else dv.UNVERSIONED

    def renew() -> None:
        if not dv.renew_lock(store, token):
            raise Refused(
                "the store's upgrade lock was lost (this host stalled past its TTL); run "
                "`inbox upgrade` again",
                code="upgrade_lock_lost",
            )

    ran: list[dict[str, Any]] = []
    todo = pending(was, migrations)
    for i, migration in enumerate(todo):
        renew()
        did = migration.run(Run(store, host, now_ms(), renew))
        ran.append({"migration": migration.name, "version": migration.version, "did": did})
        say(f"inbox upgrade: {migration.name}: {did}")
        last_of_step = i + 1 == len(todo) or todo[i + 1].version != migration.version
        if last_of_step:
            dv.stamp(
                store,
                migration.version,
                dv.RELEASE_OF.get(migration.version, __version__),
                host,
                now_ms(),
            )
    if not todo or todo[-1].version < dv.DATA_VERSION:
        dv.stamp(store, dv.DATA_VERSION, __version__, host, now_ms())
    return {"ok": True, "version": dv.DATA_VERSION, "was": was, "ran": ran}


def wake_consents(store: Store, settings: Settings) -> list[dict[str, str]]:
    """This host's sessions whose wake command is off until a person keeps it here:
    ``[{"session", "wake_cmd", "reason", "fix"}]`` (bus.core.wake_consent)."""
    rows = [s.model_dump() for s in store.sessions.sessions()]
    off = wake_off(str(settings.home), settings.host, rows)
    by_sid = {row["session"]: row for row in rows}
    return [{"session": sid, "wake_cmd": by_sid[sid]["wake_cmd"], **off[sid]} for sid in off]


def with_wake_consent(
    report: dict[str, Any], settings: Settings, sids: list[str] | None = None
) -> dict[str, Any]:
    """``inbox doctor``'s report with a problem for each session of this host whose wake
    command waits for consent (:func:`wake_consents`; of ``sids`` when named). The store
    not answering leaves the check out and says so (``skipped``)."""
    from bus.store.connect import open_store
    from bus.store.redis_errors import NOT_ANSWERING

    try:
        store = open_store(settings)
        try:
            consents = wake_consents(store, settings)
        finally:
            dv.close(store)
    except (Unavailable, *NOT_ANSWERING):  # type: ignore[misc]
        return {**report, "skipped": ["wake_consent: the store does not answer"]}
    problems = [
        {
            "session": c["session"],
            "check": "wake_consent",
            "effect": EFFECT,
            "reason": c["reason"],
            "fix": c["fix"],
        }
        for c in consents
        if not sids or c["session"] in sids
    ]
    all_problems = [*report["problems"], *problems]
    return {**report, "ok": not all_problems, "problems": all_problems}


def consent_lines(consents: list[dict[str, str]], who: str = "inbox up") -> list[str]:
    """What ``inbox up`` (or ``who``: a worker started alone) prints about
    :func:`wake_consents` (pure)."""
    if not consents:
        return []
    lines = [
        f"{who}: {len(consents)} session(s) of this host are not woken by their wake "
        "command until you keep it here (it was kept in the session's record only; this "
        "host runs only one kept on it). Check each command, then run:"
    ]
    lines += [f"  {c['session']}: {c['fix']}" for c in consents]
    return lines


def prepare(store: Store, settings: Settings, say: Say, *, wait_s: float = 0.0) -> dict[str, Any]:
    """What ``inbox up`` does before its workers start (after waiting up to ``wait_s`` for
    the server to answer): refuse data newer than this code, upgrade older data, and
    name the wake commands waiting for consent."""
    if wait_s:
        dv.wait_answering(store, wait_s)
    report = upgrade(store, settings.host, say)
    report["wake_consent"] = wake_consents(store, settings)
    for line in consent_lines(report["wake_consent"]):
        say(line)
    return report


__all__ = [
    "EXIT_DATA_TOO_NEW",
    "DataTooNew",
    "Run",
    "check_readable",
    "consent_lines",
    "pending",
    "prepare",
    "upgrade",
    "wake_consents",
    "with_wake_consent",
]
