"""The accounting ``bench/swarm_hosts.py`` adds to chaos.py's: per kind, per fault, per host.

:func:`account_extra` takes chaos.Soak's accounting of the messages the running hosts
must hear and adds send → heard calm and under faults per session kind (a fault's
window runs from its start to its end plus ``chaos.FAULT_WINDOW_S``), notice lines per
tool step, the removed host's messages and how soon senders learned it (``stale``),
waited sends, replies and the send rate. :func:`idle_memory` measures the cluster's
memory per idle session.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

from bench.chaos import FAULT_WINDOW_S, pct

# The soak swarm_hosts.py runs (its HostsSoak, which imports this module: named here by
# its role so the arrow points one way).
HostsSoak = Any


def _spread(xs: list[float]) -> dict[str, Any]:
    return {"p50": pct(xs, 50), "p99": pct(xs, 99), "max": pct(xs, 100), "n": len(xs)}


def account_extra(
    soak: HostsSoak,
    sent: dict[str, tuple[str, float]],
    res: dict[str, Any],
    gone: dict[str, Any] | None,
) -> dict[str, Any]:
    windows = [(f["t"], f["until"] + FAULT_WINDOW_S) for f in soak.faults]
    calm: dict[str, list[float]] = {}
    faulty: dict[str, list[float]] = {}
    for mid, (sid, t) in sent.items():
        h = soak.heard.get(mid)
        if h is None:
            continue
        kind = soak.sessions.get(sid, ("", "?"))[1]
        under = any(lo <= t <= hi for lo, hi in windows)
        (faulty if under else calm).setdefault(kind, []).append(h - t)
    every_calm = [x for xs in calm.values() for x in xs]
    every_faulty = [x for xs in faulty.values() for x in xs]
    res["heard_p50_calm_s"], res["heard_p99_calm_s"] = pct(every_calm, 50), pct(every_calm, 99)
    res["heard_p50_faults_s"] = pct(every_faulty, 50)
    res["heard_p99_faults_s"] = pct(every_faulty, 99)
    res["heard_calm_by_kind_s"] = {k: _spread(v) for k, v in sorted(calm.items())}
    res["heard_faults_by_kind_s"] = {k: _spread(v) for k, v in sorted(faulty.items())}
    # A harness shows what its socket took at its next tool step (every --step seconds).
    per_step = Counter((sid, int(t / soak.args.step)) for sid, t in soak.sock_lines)
    steps = {**soak.steps, "sock": list(per_step.values())}
    res["notices_per_tool_step"] = {
        kind: {
            "steps": len(ns),
            "max": max(ns, default=0),
            "mean": round(sum(ns) / len(ns), 3) if ns else None,
            "over_one": sum(1 for n in ns if n > 1),
        }
        for kind, ns in sorted(steps.items())
    }
    # The removed host: its messages not heard before it went, and the senders' learning.
    learned = _learned(soak)
    removed_fault = next((f for f in res["faults"] if f["fault"] == "remove"), None)
    if removed_fault is not None:
        removed_fault["recovery_s"] = learned.get("first_s")
        removed_fault["learned"] = learned
    res["removed_host"] = {
        "messages_after": len(soak.gone_sent),
        **({k: gone[k] for k in ("stored_once", "lost", "stored_twice", "marks")} if gone else {}),
        "learned": learned,
    }
    real = [f for f in res["faults"] if f["fault"] != "remove"]
    recov = [f.get("recovery_s") for f in real]
    res["max_recovery_s"] = max((x for x in recov if x is not None), default=None)
    res["recoveries_failed"] = sum(1 for x in recov if x is None)
    res["failover_detection_s"] = [f["failover_s"] for f in real if "failover_s" in f]
    res.update(_heard_again(soak))
    res["not_heard_state"] = _why_unheard(soak, res.get("not_heard_ids") or [])
    res["supervised"] = True  # each host's worker runs under its own `inbox up`
    res.update(_sent_extras(soak))
    t0, t1 = soak.t_send
    res["send_rate_per_s"] = round(len(sent) / (t1 - t0), 1) if t1 > t0 else None
    res["hosts"], res["sessions"] = len(soak.hosts), len(soak.sessions)
    res["stale_s"] = soak.args.stale_s
    return res


KILLS = ("worker_kill", "workers_kill", "master_kill")


def _heard_again(soak: HostsSoak) -> dict[str, Any]:
    """Which repeated hearings a kill explains. A notice a listener acked just before its
    worker (or the master holding its marks) was killed is carried again, once: allowed
    when the message was first heard from ``FAULT_WINDOW_S`` before such a kill on its
    session's host (a master's: any host) to the kill's end; anything else is not."""
    counts = Counter(mid for mid, *_rest in soak.again)
    explained, unexplained = 0, []
    for mid, sid, t, how, first_how in soak.again:
        first, host = soak.heard[mid], soak.host_of(sid)
        after_kill = counts[mid] == 1 and any(
            f["t"] - FAULT_WINDOW_S <= first <= f["until"] + 1.0
            and (f["fault"] == "master_kill" or host in f["host"].split(","))
            for f in soak.faults
            if f["fault"] in KILLS
        )
        if after_kill:
            explained += 1
        else:
            # how: as the harness took it each time (sock, sock-floor: a socket session's
            # floor drained, floor, wake)
            unexplained.append(
                {"id": mid, "sid": sid, "first": first, "again": t, "how": [first_how, how]}
            )
    return {
        "heard_twice_after_kill": explained,
        "heard_again_unexplained": len(unexplained),
        "heard_again_unexplained_ids": unexplained[:10],
        "heard_most_times": 1 + max(counts.values(), default=0) if soak.heard else 0,
    }


def _why_unheard(soak: HostsSoak, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For the first messages never heard: their record and what the sweep sees."""
    out = []
    for row in rows[:5]:
        sid = row["sid"]
        store = soak.bus(soak.host_of(sid)).store
        try:
            recs = store.inbox.records(sid, [row["id"]])
            views = store.schedule.sweep_views([sid])
            view = views[0][1]._asdict() if views else None
            out.append({**row, "record": recs[0] if recs else None, "sweep_view": view})
        except Exception as exc:  # the store itself away: say so
            out.append({**row, "error": repr(exc)})
    return out


def _learned(soak: HostsSoak) -> dict[str, Any]:
    """When senders saw the removed host's sessions ``stale``, from the removal."""
    if not soak.removed:
        return {}
    host, t_removed = next(iter(soak.removed.items()))
    firsts: dict[int, float] = {}
    sids: set[str] = set()
    for path in soak.base.glob("learn-*.txt"):
        for raw in path.read_text().splitlines():
            rec = json.loads(raw)
            if soak.sessions.get(rec["sid"], ("",))[0] != host or rec["t"] < t_removed:
                continue
            sids.add(rec["sid"])
            firsts[rec["sender"]] = min(firsts.get(rec["sender"], rec["t"]), rec["t"])
    ts = sorted(t - t_removed for t in firsts.values())
    targets = sum(1 for s, (h, _k) in soak.sessions.items() if h == host and "probe" not in s)
    return {
        "senders": len(firsts),
        "sessions_learned": len(sids),
        "sessions": targets,
        "first_s": round(ts[0], 3) if ts else None,
        "p50_s": pct(ts, 50),
        "last_s": pct(ts, 100),
    }


def _sent_extras(soak: HostsSoak) -> dict[str, Any]:
    waited: Counter[str] = Counter()
    wait_s: list[float] = []
    for path in soak.base.glob("sent-[0-9]*.txt"):
        for line in path.read_text().splitlines():
            parts = line.split()
            if parts[0] == "waited" and len(parts) == 4:
                waited[parts[2]] += 1
                wait_s.append(float(parts[3]))
    replies = sum(len(p.read_text().splitlines()) for p in soak.base.glob("sent-reply-*.txt"))
    notes = sum(
        1
        for path in soak.base.glob("sent-[0-9]*.txt")
        for line in path.read_text().splitlines()
        if line.startswith("ns-")
    )
    return {
        "waited": dict(waited),
        "waited_s": _spread(wait_s),
        "replies": replies,
        "notes_to_self": notes,
    }


def idle_memory(soak: HostsSoak) -> dict[str, Any]:
    """Open ``--memory-sessions`` idle sessions on the first host with one message each,
    wait ``--memory-wait`` (the schedulers' housekeeping runs), measure the masters."""
    n, cluster = soak.args.memory_sessions, soak.cluster
    if n <= 0 or cluster is None:
        return {}
    bus = soak.bus(soak.hosts[0])
    roles = cluster.roles()

    def keys() -> int:
        return sum(
            int(cluster.client(node).dbsize())
            for node in cluster.nodes
            if node.alive() and roles.get(node.port, {}).get("role") == "master"
        )

    time.sleep(2.0)
    before, k0 = cluster.memory(), keys()
    for i in range(n):
        bus.open_session(f"idle{i}")
    for i in range(n):
        bus.send(
            {"id": f"mem-{i}", "from": f"{soak.hosts[0]}:mem", "to_id": f"idle{i}", "text": "one"}
        )
    time.sleep(soak.args.memory_wait)
    roles = cluster.roles()
    after, k1 = cluster.memory(), keys()
    grown, grown_all = after["masters"] - before["masters"], after["all"] - before["all"]
    out: dict[str, Any] = {
        "sessions": n,
        "waited_s": soak.args.memory_wait,
        "server": "memory args" if soak.args.memory_args else "stock",
        "bytes_per_session": round(grown / n),
        "bytes_per_session_with_replicas": round(grown_all / n),
        "keys_per_session": round((k1 - k0) / n, 2),
    }
    if grown <= 0 or grown_all <= 0:
        # The rest of the run's housekeeping (compaction, trims) freed more than these
        # sessions took: no figure, rather than a negative one.
        out["bytes_per_session"] = out["bytes_per_session_with_replicas"] = None
        out["unmeasured"] = f"the run freed more memory than {n} sessions took; use more"
    return out


def report_extra(res: dict[str, Any]) -> str:
    lines = [
        f"hosts {res['hosts']}, sessions {res['sessions']}, send rate {res['send_rate_per_s']}/s,"
        f" replies {res['replies']}, waited sends {res['waited']} (took {res['waited_s']}),"
        f" notes to self {res['notes_to_self']}",
        f"heard again: {res['heard_twice_after_kill']} once after a kill,"
        f" {res['heard_again_unexplained']} otherwise {res['heard_again_unexplained_ids']}",
        "  calm by kind: " + _kinds(res["heard_calm_by_kind_s"]),
        "  under faults by kind: " + _kinds(res["heard_faults_by_kind_s"]),
        f"notice lines per tool step {res['notices_per_tool_step']}",
        f"removed host: {res['removed_host']}",
        f"failover detection {res['failover_detection_s']} s; max recovery {res['max_recovery_s']}"
        f" s; recoveries failed {res['recoveries_failed']}",
    ]
    for f in res["faults"]:
        extra = {k: v for k, v in f.items() if k not in ("fault", "host", "recovery_s", "until")}
        lines.append(f"  {f['fault']:<13} {f['host']}: recovery {f.get('recovery_s')} s {extra}")
    lines.append(f"memory per idle session: {res.get('memory')}")
    return "\n".join(lines)


def _kinds(by: dict[str, dict[str, Any]]) -> str:
    return ", ".join(f"{k} p50 {v['p50']} p99 {v['p99']} (n {v['n']})" for k, v in by.items())
