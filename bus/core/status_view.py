"""``inbox status`` as one JSON answer: the sessions with their backlogs, each heartbeat's
row (ages, queue depth, the floor serving its host), the memory settings' report. Pure,
and standard library only: the library (:mod:`bus.telemetry.status`,
:mod:`bus.telemetry.liveness`) and the read lane (:mod:`bus.lanes.read_answers`) both
answer with these; the caller reads the store.
"""

from __future__ import annotations

import json

# Not ``typing.TYPE_CHECKING``: importing typing alone costs the read lane several ms.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    # One host's floor claim and its last refusal, as the store reads them.
    FloorPair = tuple[dict[str, str], dict[str, str]]

SCHEDULER = "scheduler"
# A host whose worker has not beaten for this long (it beats every 2 s,
# bus.telemetry.liveness) is ``down``: about five beats missed, so a loaded machine's
# late beat is no alarm, and a dead host is seen within seconds (INBOX_HOST_DOWN_S).
HOST_DOWN_S = 10.0


def scheduler_beat(host: str) -> str:
    """The heartbeat name of host ``host``'s scheduler (each host runs one)."""
    return f"{SCHEDULER}.{host}"


def is_scheduler(name: str) -> bool:
    """Whether heartbeat ``name`` is a scheduler's (``scheduler.<host>``, or the one
    shared name an older scheduler beats under)."""
    return name == SCHEDULER or name.startswith(SCHEDULER + ".")


# A host whose worker was started (``inbox up`` marks it ``starting``) and has not beaten
# since is ``starting`` this long, then ``down``: a worker's boot takes seconds on a loaded
# machine (bus.telemetry.liveness.BOOT_MIN_S is the supervisor's bound on it).
HOST_STARTING_S = 60.0


def beat_state(
    beat_ms: int | None,
    now: int,
    down_s: float = HOST_DOWN_S,
    starting_ms: int | None = None,
    starting_s: float = HOST_STARTING_S,
) -> str:
    """A heartbeat's state at ``now``: ``up`` when a beat came within ``down_s``;
    ``starting`` when its worker was started (``starting_ms``) after its last beat, within
    ``starting_s``; ``unseen`` when it never beat nor was started (no worker ever served
    the name on this store); else ``down`` (it beat once, or was started, and stopped)."""
    if beat_ms is not None and now - beat_ms <= down_s * 1000:
        return "up"
    if starting_ms is not None and starting_ms > (beat_ms or 0):
        return "starting" if now - starting_ms <= starting_s * 1000 else "down"
    return "unseen" if beat_ms is None and starting_ms is None else "down"


def host_state(beat: tuple[int | None, int | None], now: int, down_s: float) -> str:
    """:func:`beat_state` of a host's ``(beat, starting)`` as the store reads them
    (:meth:`bus.store.beats.BeatStore.beats_at`)."""
    return beat_state(beat[0], now, down_s, starting_ms=beat[1])


def host_queue(host: str) -> str:
    """Host ``host``'s own Celery queue (deliveries to its sessions)."""
    return f"host.{host}"


def queue_of(name: str) -> str | None:
    """The broker queue heartbeat ``name`` works off; ``None`` for a scheduler."""
    return None if is_scheduler(name) else host_queue(name)


def split_floor(floor: str) -> tuple[str, str]:
    """``(machine, home)`` of a floor id (``machine<TAB>home``)."""
    machine, _, home = floor.partition("\t")
    return machine, home


def floor_json(fields: dict[str, str]) -> dict[str, Any]:
    """A floor as status shows it: machine, home, and the pid where one is kept."""
    machine, home = split_floor(fields.get("floor", ""))
    out: dict[str, Any] = {"machine": machine, "home": home}
    if fields.get("pid", "").isdigit():
        out["pid"] = int(fields["pid"])
    return out


def floor_row(claim: dict[str, str], refusal: dict[str, str]) -> dict[str, Any]:
    """``floor`` (who serves the host) and ``refused`` (the last worker refused it: its
    floor, when, and the holder it was refused for), where there are."""
    row: dict[str, Any] = {}
    if claim.get("floor"):
        row["floor"] = floor_json(claim)
    if refusal.get("floor"):
        refused = floor_json(refusal)
        if refusal.get("at", "").isdigit():
            refused["at"] = int(refusal["at"])
        refused["holder"] = floor_json(
            {"floor": refusal.get("holder", ""), "pid": refusal.get("holder_pid", "")}
        )
        row["refused"] = refused
    return row


def _beats(fields: dict[str, str], now: int, down_s: float) -> bool:
    raw = fields.get("beat", "")
    return raw.isdigit() and beat_state(int(raw), now, down_s) == "up"


def worker_rows(
    beats: list[tuple[str, dict[str, str], int]],
    now: int,
    floors: Callable[[list[str]], list[FloorPair]],
    down_s: float = HOST_DOWN_S,
) -> list[dict[str, Any]]:
    """Each heartbeat's row from ``(name, fields, queue depth)``: its ``state`` (``up``,
    or ``down`` past ``down_s`` without a beat: :func:`beat_state`), its ages in seconds
    at ``now``, pid, tasks done, for a scheduler its ``host``, and for a host its queue's
    depth and its floor row (``floors`` reads the hosts' floor pairs, in order). The row
    0.1.0's schedulers shared (``scheduler``) is shown only while one still beats it (a
    rolling upgrade); the upgrade deletes it (bus.ops.migrations)."""
    rows = []
    for name, beat, depth in beats:
        if name == SCHEDULER and not _beats(beat, now, down_s):
            continue  # 0.1.0's shared scheduler row, its scheduler gone: nothing to serve
        scheduler = is_scheduler(name)
        row: dict[str, Any] = {"name": name, "role": "scheduler" if scheduler else "worker"}
        if scheduler and name != SCHEDULER:
            row["host"] = name[len(SCHEDULER) + 1 :]
        last = int(beat["beat"]) if beat.get("beat", "").isdigit() else None
        starting = int(beat["starting"]) if beat.get("starting", "").isdigit() else None
        # A row is listed because its process wrote it: never ``unseen``.
        state = beat_state(last, now, down_s, starting_ms=starting)
        row["state"] = "down" if state == "unseen" else state
        for field, out in (("beat", "beat_age_s"), ("progress", "progress_age_s")):
            if beat.get(field):
                row[out] = round(max(0, now - int(beat[field])) / 1000, 1)
        if beat.get("pid"):
            row["pid"] = int(beat["pid"])
        if beat.get("done"):
            row["done"] = int(beat["done"])
        if beat.get("version"):  # the release the process runs (none before 0.2.0)
            row["version"] = beat["version"]
        if not scheduler:
            row["queue"] = depth
        rows.append(row)
    hosts = [row for row in rows if row["role"] == "worker"]
    pairs = floors([row["name"] for row in hosts])
    for row, (claim, refusal) in zip(hosts, pairs, strict=True):
        row.update(floor_row(claim, refusal))
    return rows


def memory_report(raw: dict[str, str]) -> dict[str, Any]:
    """The scheduler's last outcome per memory setting, from their stored JSON (one that
    does not parse is left out)."""
    out: dict[str, Any] = {}
    for name, text in raw.items():
        try:
            out[name] = json.loads(text)
        except ValueError:
            continue
    return out


def local_sessions(host: str, sessions: list[dict[str, Any]]) -> list[str]:
    """The ids of ``sessions`` that live on ``host`` (whose sockets this host serves)."""
    return [row["session"] for row in sessions if row.get("host") == host]


def status_report(
    *,
    host: str,
    store: str,
    home: str,
    sessions: list[dict[str, Any]],
    backlogs: list[int],
    workers: list[dict[str, Any]],
    memory: dict[str, Any],
    unreachable: dict[str, dict[str, str]] | None = None,
    processes: list[dict[str, Any]] | None = None,
    wake_off: dict[str, dict[str, str]] | None = None,
) -> dict[str, Any]:
    """The status answer: each session's record without its unset (``None``) fields and
    with its backlog, beside the host, the store's (redacted) address and the home, and
    the processes this host's ``inbox up`` runs (bus.local.up_procs; none without one). A
    session in ``unreachable`` (this host's, its socket neither bindable nor reachable:
    no wake while idle, no message mid-turn) carries its ``{"reason", "fix"}`` there; one
    in ``wake_off`` (this host's, its wake command not kept here: bus.core.wake_consent)
    its ``wake``: ``{"state": "off", "reason", "fix"}``. ``version`` is the release this
    host runs; each worker's row says the one it runs."""
    from bus.core.version import __version__

    rows = []
    for row, backlog in zip(sessions, backlogs, strict=True):
        shown = {k: v for k, v in row.items() if v is not None}
        shown["backlog"] = backlog
        if unreachable and row.get("session") in unreachable:
            shown["unreachable"] = unreachable[row["session"]]
        if wake_off and row.get("session") in wake_off:
            shown["wake"] = wake_off[row["session"]]
        rows.append(shown)
    return {
        "ok": True,
        "host": host,
        "version": __version__,
        "store": store,
        "home": home,
        "sessions": rows,
        "workers": workers,
        "processes": processes or [],
        "memory_settings": memory,
    }
