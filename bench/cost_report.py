"""``bench/cost.py``'s goals (each met or not, from the run's figures) and its table."""

from __future__ import annotations

from typing import Any

KB = 1024


def _get(out: dict[str, Any], *path: str) -> Any:
    cur: Any = out
    for key in path:
        if not isinstance(cur, dict) or key not in cur:
            return None
        cur = cur[key]
    return cur


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else round(a / b, 2)


def goals(out: dict[str, Any]) -> list[dict[str, Any]]:
    """Each goal of the issue with its figure from ``out`` and whether it is met (None:
    the row was skipped)."""
    bus_ms = _get(out, "sparse", "bus", "cpu_ms_per_msg")
    naive_ms = _get(out, "sparse", "naive", "cpu_ms_per_msg")
    rows = [
        *(
            (
                f"inbox {name} ÷ bare python -c pass",
                _get(out, "cli", f"{name}_over_python"),
                "<=",
                1.5,
            )
            for name in ("send", "reply", "withdraw", "decide")
        ),
        ("sparse: bus CPU/msg ÷ naive", _ratio(bus_ms, naive_ms), "<=", 1.0),
        ("sparse: bus heard p99 ms", _get(out, "sparse", "bus", "heard_ms", "p99"), "<=", 50),
        ("lone: worker round trips", _get(out, "lone", "worker_trips_median"), "<=", 3),
        ("lone: worker script calls", _get(out, "lone", "worker_scripts_median"), "<=", 1),
        ("burst: e2e ÷ naive", _get(out, "burst", "e2e_over_naive"), ">=", 10),
        ("burst: ingest ÷ raw XADD", _get(out, "burst", "ingest_over_raw"), ">=", 0.3),
        ("idle session B (INFO)", _get(out, "memory", "info_bytes_per_session"), "<=", 2 * KB),
    ]
    res = []
    for name, value, op, bound in rows:
        met = None if value is None else (value <= bound if op == "<=" else value >= bound)
        res.append({"goal": name, "value": value, "bound": f"{op} {bound}", "met": met})
    return res


def _f(v: Any, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec) if isinstance(v, float) else str(v)


def report(out: dict[str, Any]) -> str:
    lines = [f"bench/cost.py{' --quick' if out.get('quick') else ''}: {out.get('cores')} cores"]
    if cli := out.get("cli"):
        lines.append(
            f"\nCLI, median wall of {cli['runs']} (inbox up serving), ms and × python -c pass:"
        )
        lines.append(
            f"  python -c pass {cli['python_ms']}  (python -S -c pass {cli['python_S_ms']})"
        )
        for name in ("send", "send_cold", "reply", "withdraw", "decide", "status"):
            label = "send, cold" if name == "send_cold" else name
            lines.append(
                f"  inbox {label:10} {cli[name + '_ms']:>7}  {cli[name + '_over_python']}×"
            )
    if sp := out.get("sparse"):
        lines.append(
            f"\nsparse: {sp['sessions']} listening sessions, {sp['rate_per_s']:.0f} msg/s Poisson,"
            f" {sp['seconds']:.0f} s to each system; CPU ms a message (processes + Redis, each"
            " beyond idle):"
        )
        lines.append(
            f"  {'system':8} {'msgs':>5} {'ms/msg':>7} {'procs':>6} {'redis':>6}"
            f" {'p50 ms':>7} {'p99 ms':>7} {'notices':>7}  idle cores procs/redis, before | after"
        )
        for name in ("naive", "minimal", "bus"):
            r = sp[name]
            lines.append(
                f"  {name:8} {r['messages']:>5} {r['cpu_ms_per_msg']:>7.2f}"
                f" {r['process_ms_per_msg']:>6.2f} {r['redis_ms_per_msg']:>6.2f}"
                f" {_f(r['heard_ms']['p50']):>7} {_f(r['heard_ms']['p99']):>7}"
                f" {r['notices']:>7}  {r['idle_cores_processes']:.3f}/{r['idle_cores_redis']:.3f}"
                f" | {r['idle_after_cores_processes']:.3f}/{r['idle_after_cores_redis']:.3f}"
            )
        lines.append(
            f"  bus ÷ naive {_ratio(sp['bus']['cpu_ms_per_msg'], sp['naive']['cpu_ms_per_msg'])},"
            f" bus ÷ minimal {_ratio(sp['bus']['cpu_ms_per_msg'], sp['minimal']['cpu_ms_per_msg'])}"
        )
        if "gross_cpu_ms_per_msg" in sp["bus"]:
            gross = {n: sp[n]["gross_cpu_ms_per_msg"] for n in ("naive", "bus")}
            lines.append(
                f"  gross (processes not net of idle): bus {gross['bus']:.2f}, naive"
                f" {gross['naive']:.2f}, {_ratio(gross['bus'], gross['naive'])};"
                f" idle sample {sp['bus'].get('idle_s', '?')} s, the systems side by side"
            )
        if "script_calls_per_msg" in sp["bus"]:
            lines.append(
                "  the servers' commands a message (INFO commandstats; a script's own commands"
                " counted too), script calls, µs a script call:"
            )
            for name in ("naive", "minimal", "bus"):
                r = sp[name]
                lines.append(
                    f"  {name:8} {r['server_commands_per_msg']:>7.1f} {r['script_calls_per_msg']:>6.2f}"
                    f" {_f(r['script_us_per_call']):>7}  {r['top_commands_per_msg']}"
                )
        if rounds := sp.get("bus_over_naive_rounds"):
            lines.append(
                f"  bus ÷ naive by round ({sp.get('rounds')} rounds, the same arrivals to each"
                f" system in turn): {', '.join(_f(r) for r in rounds)}"
            )
    if lone := out.get("lone"):
        lines.append(
            f"\nlone delivery ({lone['count']} at {lone['rate_per_s']:.0f}/s): worker round trips"
            f" {lone['worker_trips_median']}, script calls {lone['worker_scripts_median']};"
            f" on the send → heard path {lone['trips_on_path_median']} (both sides);"
            f" heard p50 {lone['send_to_heard_ms']['p50']} ms (an agent's send, naming its session)"
        )
        if bare := lone.get("bare_handle"):
            lines.append(
                f"  from a bare handle (a person, a script): worker round trips"
                f" {bare['worker_trips_median']}, script calls {bare['worker_scripts_median']}"
            )
    if b := out.get("burst"):
        lines.append(
            f"\nburst: inbox send --jsonl of {b['messages']} to {b['sessions']} sessions:"
            f" ingest {b['ingest_per_s']:.0f}/s ÷ raw XADD {b['raw_per_s']:.0f}/s ="
            f" {b['ingest_over_raw']}; e2e {b['e2e_per_s']:.0f}/s ({b['e2e_notices']} notices)"
            f" ÷ naive {b['naive_per_s']:.0f}/s ({b['naive_messages']}) = {b['e2e_over_naive']}×"
        )
    if m := out.get("memory"):
        lines.append(
            f"\nmemory, idle session on a stock redis-server ({m['sessions']} sessions, scheduler"
            f" {m['settle_s']:.0f} s): INFO {m['info_bytes_per_session']} B, MEMORY USAGE"
            f" {m['usage_bytes_per_session']} B, {m['keys_per_session']} keys"
        )
    lines.append(f"\n{'goal':34} {'figure':>8} {'bound':>9}  met")
    for g in out.get("goals", []):
        met = {True: "met", False: "NOT MET", None: "skipped"}[g["met"]]
        lines.append(f"{g['goal']:34} {_f(g['value']):>8} {g['bound']:>9}  {met}")
    return "\n".join(lines)
