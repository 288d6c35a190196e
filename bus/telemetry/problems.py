"""``inbox doctor``'s checks of the whole bus, for an operator: what keeps messages from
their sessions anywhere, read from the store.

- ``host``: a host whose worker stopped beating (``down``, bus.core.status_view.beat_state)
  while it has sessions open or deliveries queued;
- ``unserved``: a session whose host no worker has ever served (a name no ``inbox up`` runs);
- ``floor``: a session whose notices cannot be written (the error, since when, tries);
- ``waiting``: a session holding a message older than the bound with no notice of it;
- ``woken``: a session woken whose harness never began the turn.

:func:`operator_problems` is pure (table-driven tests); :func:`operator_report` reads the
store for it. ``/metrics`` shows the same counts (:mod:`bus.telemetry.metrics`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bus.core.status_view import is_scheduler

if TYPE_CHECKING:
    from bus.core.settings import Settings
    from bus.store.store import Store

# A message waiting this long for a notice is a problem (an FYI waits up to
# INBOX_FYI_FLUSH_S on purpose: the bound is at least twice that).
WAIT_BOUND_S = 1800.0
# A wake whose harness began no turn within this long: nobody took it.
WOKEN_BOUND_S = 60.0
# A notice worth a wake left on the floor this long (INBOX_WAKE_TURN_TIMEOUT_S's default):
# no harness drained it, though the session may count as idle again by now.
UNDRAINED_BOUND_S = 300.0
CHECKS = ("host", "unserved", "floor", "waiting", "woken")


def operator_problems(
    workers: list[dict[str, Any]],
    sessions: list[dict[str, Any]],
    oldest: list[int | None],
    now: int,
    *,
    wake_notices: list[int | None] | None = None,
    wait_bound_s: float = WAIT_BOUND_S,
    woken_bound_s: float = WOKEN_BOUND_S,
    undrained_bound_s: float = UNDRAINED_BOUND_S,
) -> list[dict[str, Any]]:
    """The problems found in ``workers`` (status rows), ``sessions`` (records as dicts),
    ``oldest`` (each session's oldest waiting message, ms, in order) and ``wake_notices``
    (each one's oldest undrained notice worth a wake, ms), each with its ``check`` (one of
    :data:`CHECKS`), what it is about, ``reason`` and ``fix``."""
    wake_notices = wake_notices or [None] * len(sessions)
    out: list[dict[str, Any]] = []
    hosts = {r["name"]: r for r in workers if not is_scheduler(r["name"])}
    # A host down matters while it has sessions open or deliveries queued; one retired
    # (its sessions closed, its queue empty) keeps its old heartbeat and is no problem.
    serving = {row.get("host") for row in sessions if row.get("state") != "closed"}
    for name, row in sorted(hosts.items()):
        if row.get("state") == "down" and (name in serving or row.get("queue")):
            age = row.get("beat_age_s")
            out.append(
                {
                    "check": "host",
                    "host": name,
                    "reason": f"its worker has not beaten for {age} s"
                    if age is not None
                    else "its worker never beat",
                    "fix": f"start `inbox up` on host {name} (INBOX_HOST={name})",
                }
            )
    for row, at, wake_at in zip(sessions, oldest, wake_notices, strict=True):
        sid, host = row["session"], row.get("host")
        if row.get("state") == "closed":
            continue
        if host not in hosts:
            out.append(
                {
                    "check": "unserved",
                    "session": sid,
                    "host": host,
                    "reason": f"no worker has ever served host {host}",
                    "fix": f"run `inbox up` with INBOX_HOST={host}, or reopen the session "
                    "on a host that runs one",
                }
            )
        if row.get("fault"):
            out.append(
                {
                    "check": "floor",
                    "session": sid,
                    "error": row["fault"],
                    "since": row.get("fault_at"),
                    "tries": row.get("faults") or 1,
                    "reason": f"its notices cannot be written: {row['fault']}",
                    "fix": f"make the session's floor under INBOX_HOME/inbox/{sid}/ on host "
                    f"{host} writable; the retry backs off, up to 10 minutes",
                }
            )
        if at is not None and now - at > wait_bound_s * 1000:
            out.append(
                {
                    "check": "waiting",
                    "session": sid,
                    "waiting_s": round((now - at) / 1000, 1),
                    "reason": f"a message has waited {round((now - at) / 1000)} s for a notice",
                    "fix": "see its host's state and floor above; `inbox status` shows backlogs",
                }
            )
        began = int(row.get("woken_at") or 0)
        late_wake = row.get("state") == "running" and began and now - began > woken_bound_s * 1000
        undrained = wake_at is not None and now - wake_at > undrained_bound_s * 1000
        woken = began if late_wake else (wake_at or 0)
        if late_wake or undrained:
            out.append(
                {
                    "check": "woken",
                    "session": sid,
                    "woken_s": round((now - woken) / 1000, 1),
                    "reason": "woken, and no harness began the turn"
                    if late_wake
                    else "a notice worth a wake waits on its floor, and no harness drained it",
                    "fix": "give the session a wake command or a listening harness "
                    "(`inbox hooks claude|codex`), or drain it",
                }
            )
    return out


def operator_report(store: Store, settings: Settings, now: int) -> list[dict[str, Any]]:
    """:func:`operator_problems` of the store as it is now."""
    from bus.telemetry import liveness

    sessions = [s.model_dump() for s in store.sessions.sessions()]
    sids = [s["session"] for s in sessions]
    oldest = store.queue.oldest_waiting(sids)
    workers = liveness.workers(store, settings.host_down_s)
    wakes = store.queue.oldest_wake_notices(sids)
    return operator_problems(workers, sessions, oldest, now, wake_notices=wakes)


def bus_problems(settings: Settings) -> list[dict[str, Any]]:
    """:func:`operator_report` through a store connection of ``settings``; a store that
    does not answer is itself the one problem (the local checks still ran)."""
    from bus.core.errors import Unavailable
    from bus.core.models import now_ms
    from bus.store.connect import open_store
    from bus.store.redis_errors import StoreError, down_message

    try:
        return operator_report(open_store(settings, None), settings, now_ms())
    except (StoreError, Unavailable, OSError) as exc:
        words, _reason = down_message(exc)
        return [
            {
                "check": "store",
                "reason": words,
                "fix": "start `inbox up`, or set INBOX_REDIS_URL (or join this home to its store)",
            }
        ]


def counts(problems: list[dict[str, Any]]) -> dict[str, int]:
    """How many problems of each check (every check named, 0 where none)."""
    out = dict.fromkeys(CHECKS, 0)
    for p in problems:
        out[p["check"]] = out.get(p["check"], 0) + 1
    return out


__all__ = ["CHECKS", "bus_problems", "counts", "operator_problems", "operator_report"]
