"""The coordinator of ``bench/swarm_hosts.py``: one session following its lanes on every host.

The coordinator is a session (``coord``, on the first host) whose lanes are sessions of
every host opened with ``--parent coord`` (``--lanes`` in all, spread evenly). It follows
them as a user's coordinator does: ``inbox watch --lanes coord --name swarm`` (a durable
subscription, bus.services.durable_watch) in the first host's namespace, its JSON lines
appended to ``coord-out.jsonl``. During the run it is SIGKILLed and started again
``--coordinator-kills`` times (a watch that exits by itself, e.g. at a failover, is
started again too and said as an incident). At the end it is given time to catch up,
then the accounting compares what it printed with the truth: every ``inbox_received``
record of every lane's events stream after the subscription's first cursors (the
accounting's own count of what was stored). Every lane message seen once is the goal; a
kill between a line's write and its cursor's move repeats that one line (the
subscription's promise: never lost), so repeats are counted against the kills.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

# The soak swarm_hosts.py runs (its HostsSoak, which imports this module: named here by
# its role so the arrow points one way).
HostsSoak = Any

COORD = "coord"
NAME = "swarm"
KIND = "inbox_received"


def pick_lanes(sessions: dict[str, tuple[str, str]], hosts: list[str], total: int) -> list[str]:
    """``total`` lane sessions spread evenly over ``hosts`` (each host's first ones, of
    every kind); no probe session."""
    per_host = {
        h: [s for s, (hh, _k) in sessions.items() if hh == h and not s.startswith("probe")]
        for h in hosts
    }
    out: list[str] = []
    i = 0
    while len(out) < total and any(i < len(v) for v in per_host.values()):
        for h in hosts:
            if i < len(per_host[h]) and len(out) < total:
                out.append(per_host[h][i])
        i += 1
    return out


class Coordinator:
    def __init__(self, soak: HostsSoak, host: str, lanes: list[str]) -> None:
        self.soak, self.host, self.lanes = soak, host, lanes
        self.out = soak.base / "coord-out.jsonl"
        self.log = soak.base / "coord.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts: dict[str, str] = {}  # lane -> its first cursor
        self.kills: list[dict[str, Any]] = []
        self.exits: list[str] = []
        self.closing = False
        self.lock = threading.Lock()

    def start(self) -> None:
        argv = [
            *(sys.executable, "-m", "bus.surfaces.cli.app", "watch"),
            *("--lanes", COORD, "--name", NAME),
        ]
        with open(self.out, "ab") as out, open(self.log, "ab") as err:
            self.proc = subprocess.Popen(
                self.soak.net.wrap(self.host, argv),
                env=self.soak.env(self.host),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                # Not die_with_parent: the parent-death signal follows the thread that
                # started it (a kill thread, the watcher), which ends before the run does.
                # close() stops it; so does the namespace's clean-up.
                start_new_session=True,
            )

    def wait_following(self, timeout: float = 300.0) -> None:
        """Until the subscription has a cursor on every lane (its first ones: kept)."""
        store = self.soak.bus(self.host).store
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = store.events.sub_cursors(NAME, self.lanes)
            if all(got.values()):
                self.starts = {s: str(c) for s, c in got.items()}
                return
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"the coordinator exited: {self.log.read_text()[-2000:]}")
            time.sleep(0.2)
        raise RuntimeError("the coordinator did not follow its lanes in time")

    def lines(self) -> int:
        try:
            return sum(1 for _ in open(self.out, "rb"))
        except FileNotFoundError:
            return 0

    def kill_and_restart(self, pause_s: float = 1.0) -> None:
        with self.lock:
            assert self.proc is not None
            before = self.lines()
            t = time.time()
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
            time.sleep(pause_s)
            self.start()
        rec: dict[str, Any] = {"t": round(t, 3), "lines_before": before}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self.lines() <= before:
            time.sleep(0.05)
        rec["printing_again_s"] = round(time.time() - t, 3) if self.lines() > before else None
        self.kills.append(rec)
        print(f"swarm: coordinator killed; printing again after {rec['printing_again_s']} s")

    def tend(self) -> None:
        """A watch that ended by itself is started again (and said)."""
        with self.lock:
            if self.closing or self.proc is None or self.proc.poll() is None:
                return
            self.exits.append(f"exit {self.proc.returncode}: {self._tail()}")
            self.soak.incidents.append(f"coordinator exited ({self.proc.returncode}); restarted")
            self.start()

    def _tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-300:].strip()
        except OSError:
            return ""

    def truth(self) -> set[tuple[str, str]]:
        store = self.soak.bus(self.host).store
        out: set[tuple[str, str]] = set()
        for sid in self.lanes:
            start = self.starts.get(sid, "0-0")
            for eid, fields in store.r.xrange(store.k.s(sid, "events"), f"({start}", "+"):
                if fields.get("kind") == KIND:
                    out.add((sid, str(eid)))
        return out

    def seen(self) -> list[tuple[str, str, str]]:
        rows: list[tuple[str, str, str]] = []
        try:
            raw_lines = self.out.read_text().splitlines()
        except FileNotFoundError:
            return rows
        for raw in raw_lines:
            try:
                ev = json.loads(raw)
            except ValueError:
                continue  # a line torn by a kill
            if "session" not in ev:  # the watch's own refusal before it exited (said apart)
                continue
            rows.append((ev["session"], ev["stream_id"], str(ev.get("message", {}).get("id"))))
        return rows

    def refusals(self) -> list[str]:
        """The lines a watch printed instead of a message (its error, as it exited)."""
        try:
            raw_lines = self.out.read_text().splitlines()
        except FileNotFoundError:
            return []
        out = []
        for raw in raw_lines:
            try:
                ev = json.loads(raw)
            except ValueError:
                continue
            if "session" not in ev:
                out.append(str(ev.get("message", ev))[:200])
        return out

    def catch_up(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.tend()
            if self.truth() <= {(s, e) for s, e, _m in self.seen()}:
                return
            time.sleep(1.0)

    def stop(self) -> None:
        with self.lock:
            self.closing = True
            if self.proc is not None and self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGINT)
                try:
                    self.proc.wait(15)
                except subprocess.TimeoutExpired:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                    self.proc.wait(5)

    def account(self) -> dict[str, Any]:
        truth = self.truth()
        rows = self.seen()
        seen = {(s, e) for s, e, _m in rows}
        missed = sorted(truth - seen)
        return {
            "lanes": len(self.lanes),
            "lane_hosts": len({self.soak.host_of(s) for s in self.lanes}),
            "lane_messages": len(truth),
            "seen_lines": len(rows),
            "seen_once": sum(1 for k in truth if k in seen),
            "missed": len(missed),
            "missed_first": [list(m) for m in missed[:5]],
            "seen_twice": len(rows) - len(seen),
            "seen_not_a_lane_message": len(seen - truth),
            "kills": len(self.kills),
            "kill_records": self.kills,
            "exits_by_itself": self.exits[:10],
            "exits_count": len(self.exits),
            "refusals": len(self.refusals()),
            "refusal_first": self.refusals()[:3],
        }


def run_kills(soak: HostsSoak) -> None:
    """Kill the coordinator and start it again, ``--coordinator-kills`` times."""
    k = soak.args.coordinator_kills
    t0 = time.monotonic()
    for i in range(k):
        at = t0 + soak.args.duration * (0.25 + 0.5 * i / max(1, k - 1))
        while time.monotonic() < at and not soak.closing:
            time.sleep(0.2)
        if soak.closing or soak.coord is None:
            return
        try:
            soak.coord.kill_and_restart()
        except Exception as exc:
            soak.incidents.append(f"coordinator kill {i}: {exc!r}")


def progress(soak: HostsSoak) -> None:
    """A line every ``--progress-s``: sent, heard, faults done, coordinator lines."""
    t0 = time.monotonic()
    while not soak.closing:
        time.sleep(soak.args.progress_s)
        sent = 0
        for path in soak.base.glob("sent-[0-9]*.txt"):
            with open(path, "rb") as f:
                sent += sum(1 for _ in f)
        coord = soak.coord.lines() if soak.coord is not None else 0
        with soak.lock:
            heard = len(soak.heard)
        print(
            f"swarm: {time.monotonic() - t0:.0f} s: sent {sent}, heard {heard},"
            f" faults {len(soak.faults)}, coordinator lines {coord}",
            flush=True,
        )


def report(res: dict[str, Any]) -> str:
    c = res.get("coordinator")
    if not c:
        return "coordinator: not run"
    again = [k["printing_again_s"] for k in c["kill_records"]]
    return (
        f"coordinator: {c['lanes']} lanes on {c['lane_hosts']} hosts, {c['lane_messages']} lane"
        f" messages; seen once {c['seen_once']}, missed {c['missed']}, seen twice"
        f" {c['seen_twice']}, not lane messages {c['seen_not_a_lane_message']};"
        f" killed {c['kills']}x (printing again after {again} s),"
        f" exited by itself {c['exits_count']}x ({c['refusals']} refusals printed:"
        f" {c['refusal_first'][:1]})"
    )
