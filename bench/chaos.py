"""Chaos soak: two hosts under load while workers, schedulers, drains and Redis are killed.

    python bench/chaos.py [--duration S] [--messages N] [--sessions N] [--senders K]

Setup (all started by this script, all stopped at the end, temp dir removed):

- a dedicated redis-server with append-only persistence on a free TCP port (the binary
  ``inbox up`` embeds, :func:`bus.ops.embedded.server_binary`), so it can be restarted and SIGKILLed;
- two hosts ``a`` and ``b`` (separate ``INBOX_HOME``), a worker each and one scheduler,
  started by :func:`bus.ops.topology.start_topology` (supervised: a killed process comes back);
- sessions of three kinds, spread over both hosts: ``sock`` (a socket listener that acks,
  running a turn), ``floor`` (running a turn, drained by a drainer process per host),
  ``wake`` (idle, woken by ``--wake-cmd``; this script then drains and ends the turn);
  plus one probe socket session per host for recovery times;
- ``--senders`` sender processes sending ``--messages`` traced messages in total at an even
  rate over ``--duration`` seconds, a few of them deliberately sent twice (same id).

During the run, spread over its middle: worker SIGKILL, scheduler SIGKILL, drainer SIGKILL,
graceful Redis restart (``--faults`` of each, default 3), plus one Redis SIGKILL. After a
settle it prints the accounting (sent, stored exactly once, lost, stored twice, marks still
``new``, notices per session, send → heard p50/p99 calm and under faults, recovery per
fault) and ends with one JSON line.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

# Run as a script from a checkout: make `bus` importable without installing it.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from bus.api import Bus
from bus.core.settings import Settings
from bus.delivery.floor_lines import heard_lines
from bus.ops.embedded import server_binary
from bus.ops.procs import die_with_parent
from bus.ops.topology import Topology, _signal_group, start_topology
from bus.surfaces.harness.listener import Listener
from tests.support.local_servers import free_port

HOSTS = ("a", "b")
PREFIX = "chaos"
FAULT_WINDOW_S = 10.0  # a message sent this long after a fault counts as "under faults"


def _now() -> float:
    return time.time()


def _free_port() -> int:
    # Outside the ephemeral range: Redis restarts on this port while clients reconnect.
    return free_port()


class RedisServer:
    """The soak's own redis-server (AOF), restartable on the same port and data dir."""

    def __init__(self, data: Path) -> None:
        self.data = data
        self.port = _free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> float:
        self.data.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [
                server_binary(),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.data),
                "--appendonly",
                "yes",
                "--appendfsync",
                "everysec",
                "--save",
                "",
                "--logfile",
                str(self.data / "redis.log"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        client = redis.Redis.from_url(self.url, socket_connect_timeout=0.2)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if client.ping():
                    client.close()
                    return _now()
            except redis.RedisError:
                pass
            time.sleep(0.02)
        raise RuntimeError("the soak's redis-server did not come up")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


# -- child roles ---------------------------------------------------------------------------


def retrying(fn: Any, stop_at: float) -> Any:
    """Call ``fn`` until it works (Redis may be down for a moment)."""
    while True:
        try:
            return fn()
        except Exception:
            if time.monotonic() > stop_at:
                raise
            time.sleep(0.2)


def role_sender(args: argparse.Namespace) -> int:
    """Send ``--count`` messages to the given sessions at ``--rate``; log id, sid, time."""
    targets = [t.split("=", 1) for t in args.targets.split(",")]
    bus = Bus(Settings.from_env())
    rnd = random.Random(args.index)
    with open(args.out, "a", buffering=1) as out:
        start = time.monotonic()
        for n in range(args.count):
            due = start + n / args.rate
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            sid, kind = targets[rnd.randrange(len(targets))]
            mid = f"cx-{args.index}-{n}"
            fields = {
                "id": mid,
                "from": f"a:sender{args.index}",
                "to_id": sid,
                "text": f"chaos {mid}",
                "class": "blocker" if kind == "wake" else "action",
            }
            resend = rnd.random() < args.resend
            retrying(lambda f=fields: bus.send(dict(f)), time.monotonic() + 120)
            out.write(f"{mid} {sid} {_now():.3f}\n")
            if resend:  # the same id again: must not be stored or carried twice
                retrying(lambda f=fields: bus.send(dict(f)), time.monotonic() + 120)
                out.write(f"resend {mid}\n")
    return 0


def role_drainer(args: argparse.Namespace) -> int:
    """Drain the given floor sessions in a loop; log each heard message id with the time."""
    sids = args.targets.split(",")
    bus = Bus(Settings.from_env())
    with open(args.out, "a", buffering=1) as out:
        recover_taken(bus, sids, Path(args.out), out)
        while True:
            for sid in sids:
                try:
                    lines = bus.drain(sid)
                except Exception:
                    time.sleep(0.2)
                    continue
                t = _now()
                for line in lines if isinstance(lines, list) else []:
                    rec = {"sid": sid, "t": t, "ids": ids_of(line), "again": _repeats_of(line)}
                    out.write(json.dumps(rec) + "\n")
            time.sleep(0.2)


def recover_taken(bus: Bus, sids: list[str], out_path: Path, out: Any) -> None:
    """What a restarted harness does: a drain it was killed in the middle of took (and
    confirmed) lines it never passed on; the floor's ``log.jsonl`` keeps them, so it
    passes on those its own record lacks, and records them as handed on (``said.jsonl``):
    the claim the killed drain left, taken again by the next drain, or the notice that
    carries them again, is then not handed on a second time."""
    logged: set[str] = set()
    for raw in out_path.read_text().splitlines() if out_path.exists() else []:
        try:
            logged.update(json.loads(raw).get("ids") or [])
        except ValueError:
            continue  # a line torn by the kill
    t = _now()
    for sid in sids:
        try:
            kept = (bus.floor.session_dir(sid) / "log.jsonl").read_text().splitlines()
        except FileNotFoundError:
            continue
        passed: list[dict[str, Any]] = []
        for raw in kept:
            try:
                line = json.loads(raw)
                ids = [i for i in ids_of(line) if i not in logged]
            except ValueError:
                continue
            if ids:
                logged.update(ids)
                out.write(json.dumps({"sid": sid, "t": t, "ids": ids}) + "\n")
                passed.append(line)
        bus.floor.handed_on(sid, passed)


def ids_of(line: dict[str, Any]) -> list[str]:
    """The message ids a line tells the harness of for the first time: a notice's, less
    those it marks as repeated (``repeats``: bus.delivery.said); a raw line's own."""
    notice = line.get("notice")
    if isinstance(notice, dict):
        again = set(_repeats_of(line))
        return [str(i) for i in notice.get("messages") or [] if str(i) not in again]
    return [str(line["id"])] if line.get("id") else []


def _repeats_of(line: dict[str, Any]) -> list[str]:
    found = line.get("repeats")
    return [str(i) for i in found] if isinstance(found, list) else []


# -- the soak ---------------------------------------------------------------------------


class Soak:
    def __init__(self, args: argparse.Namespace, base: Path) -> None:
        self.args = args
        self.base = base
        self.redis = RedisServer(base / "redis")
        self.heard: dict[str, float] = {}
        self.heard_twice = 0  # by message id: a message told the harness again
        self.repeats_marked = 0  # message ids a notice carried again, marked as repeated
        self.twice: list[dict[str, Any]] = []  # the first few, for the report
        self.notices: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.faults: list[dict[str, Any]] = []
        self.listeners: list[Listener] = []
        self.drainers: dict[str, subprocess.Popen[bytes]] = {}
        self.drainers_lock = threading.Lock()  # one drainer a host, even across a restart
        self.topo: Topology | None = None
        self.sessions: dict[str, tuple[str, str]] = {}  # sid -> (host, kind)
        # Every wait is bounded by this, so the soak always ends with its accounting.
        self.deadline = time.monotonic() + args.deadline
        self.incidents: list[str] = []
        self.closing = False

    # -- setup ------------------------------------------------------------------------

    def settings(self, host: str) -> Settings:
        assert self.topo is not None
        return Settings.from_env(self.topo.env_for(host))

    def bus(self, host: str) -> Bus:
        return Bus(self.settings(host))

    def on_line(self, sid: str) -> Any:
        def handle(obj: dict[str, Any]) -> bool:
            self.hear(sid, ids_of(obj), _now(), _repeats_of(obj))
            return True

        return handle

    def hear(self, sid: str, ids: list[str], t: float, repeats: list[str] | None = None) -> None:
        with self.lock:
            self.notices[sid] += 1
            self.repeats_marked += len(repeats or [])
            for mid in ids:
                if mid in self.heard:
                    self.heard_twice += 1
                    if len(self.twice) < 10:
                        self.twice.append(
                            {"id": mid, "sid": sid, "first": self.heard[mid], "again": t}
                        )
                else:
                    self.heard[mid] = t

    def setup(self) -> None:
        self.redis.start()
        env = {
            "INBOX_WAKE_DEBOUNCE_S": "0.5",
            "INBOX_FYI_FLUSH_S": "5",
            "INBOX_RETRY_S": "2",
            # The accounting counts what was stored by the sessions' events: kept.
            "INBOX_EVENTS_KEEP_S": "3600",
            "INBOX_DISPATCHER": "workers.dispatch:CeleryDispatcher",
        }
        if os.environ.get("INBOX_KICK"):  # the soak with the kick list (bus.delivery.kick_list)
            env["INBOX_KICK"] = os.environ["INBOX_KICK"]
        os.environ.update(env)
        self.topo = start_topology(
            self.base / "hosts",
            list(HOSTS),
            redis_url=self.redis.url,
            key_prefix=PREFIX,
            concurrency=2,
            env=env,
        )
        for host in HOSTS:
            os.environ.update(self.topo.settings_env(host))  # children inherit it
        n = self.args.sessions
        kinds = ("sock", "floor", "wake")
        for i in range(n):
            host, kind = HOSTS[i % 2], kinds[(i // 2) % 3]
            self.sessions[f"{kind}{i}"] = (host, kind)
        for host in HOSTS:
            self.sessions[f"probe-{host}"] = (host, "sock")
        for sid, (host, kind) in self.sessions.items():
            bus = self.bus(host)
            wake_cmd = None
            if kind == "wake":
                wake_cmd = f"cat > /dev/null; echo woke >> {self.base / (sid + '.wakes')}"
            bus.open_session(sid, wake_cmd=wake_cmd)
            if kind in ("sock", "floor"):
                bus.turn(sid, "start")
            if kind == "sock":
                self.listeners.append(
                    Listener.for_session(bus.floor, sid, self.on_line(sid)).start()
                )
        for host in HOSTS:
            self.start_drainer(host)

    def start_drainer(self, host: str) -> None:
        assert self.topo is not None
        sids = [s for s, (h, k) in self.sessions.items() if h == host and k == "floor"]
        self.drainers[host] = subprocess.Popen(
            [
                *(sys.executable, __file__, "--role", "drainer", "--targets", ",".join(sids)),
                *("--out", str(self.base / f"drain-{host}.jsonl")),
            ],
            env=self.topo.env_for(host),
            start_new_session=True,
            preexec_fn=die_with_parent,  # never outlive the soak (nor hold its stdout)
        )

    def start_senders(self) -> list[subprocess.Popen[bytes]]:
        assert self.topo is not None
        a = self.args
        targets = ",".join(f"{s}={k}" for s, (_h, k) in self.sessions.items() if "probe" not in s)
        per = a.messages // a.senders
        rate = max(1.0, per / a.duration)
        return [
            subprocess.Popen(
                [
                    *(sys.executable, __file__, "--role", "sender", "--index", str(i)),
                    *("--count", str(per), "--rate", str(rate), "--targets", targets),
                    *("--resend", str(a.resend), "--out", str(self.base / f"sent-{i}.txt")),
                ],
                env=self.topo.env_for(HOSTS[0]),
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
            for i in range(a.senders)
        ]

    # -- watching ---------------------------------------------------------------------

    def poll_files(self, offsets: dict[Path, int]) -> None:
        """Read drainers' logs; for woken sessions, drain their floor and end the turn."""
        for path in self.base.glob("drain-*.jsonl"):
            with open(path) as f:
                f.seek(offsets.get(path, 0))
                data = f.read()
                cut = data.rfind("\n") + 1
                offsets[path] = offsets.get(path, 0) + len(data[:cut].encode())
            for raw in data[:cut].splitlines():
                rec = json.loads(raw)
                self.hear(rec["sid"], rec["ids"], rec["t"], rec.get("again"))
        for path in self.base.glob("*.wakes"):
            size = path.stat().st_size
            if size == offsets.get(path, 0):
                continue
            offsets[path] = size
            sid = path.name[: -len(".wakes")]
            bus = self.bus(self.sessions[sid][0])
            try:
                lines = bus.drain(sid)
                t = _now()
                for line in lines if isinstance(lines, list) else []:
                    self.hear(sid, ids_of(line), t, _repeats_of(line))
                bus.turn(sid, "end")
            except Exception:
                offsets[path] = 0  # Redis down: try again next round

    def restart_dead(self) -> None:
        """Bring back harness processes (drainers); the topology's supervisor restarts the
        bus's own."""
        if self.closing:
            return
        # Under the lock a drain kill holds from its kill to its restart: else this sees
        # the killed drainer dead and starts a second one for the host beside the kill's.
        with self.drainers_lock:
            for host, proc in list(self.drainers.items()):
                if proc.poll() is not None:
                    self.start_drainer(host)

    def probe(self, host: str, label: str, t_fault: float, timeout: float = 90.0) -> float | None:
        """Send to the host's probe session until heard; the time from the fault."""
        bus = self.bus(host)
        mid = f"probe-{label}-{int(t_fault * 1000)}"
        deadline = min(time.monotonic() + timeout, self.deadline)
        sent = False
        while time.monotonic() < deadline:
            if not sent:
                try:
                    bus.send({"id": mid, "from": "a:probe", "to_id": f"probe-{host}", "text": "p"})
                    sent = True
                except Exception:
                    pass
            with self.lock:
                if mid in self.heard:
                    return self.heard[mid] - t_fault
            time.sleep(0.05)
        return None

    def scheduler_probe(self, t_fault: float, timeout: float = 90.0) -> float | None:
        """Put a due entry in the schedule; the time until a scheduler took it."""
        bus = self.bus(HOSTS[0])
        deadline = min(time.monotonic() + timeout, self.deadline)
        placed = False
        while time.monotonic() < deadline:
            try:
                if not placed:
                    bus.store.schedule.schedule("due", "probe-a", int(_now() * 1000))
                    placed = True
                if bus.store.r.zscore(bus.store.k.due, "due|probe-a") is None:
                    return _now() - t_fault
            except Exception:
                pass
            time.sleep(0.05)
        return None

    # -- faults -----------------------------------------------------------------------

    def fault(self, kind: str, n: int) -> None:
        topo = self.topo
        assert topo is not None
        host = HOSTS[n % 2]
        rec: dict[str, Any] = {"fault": kind, "host": host}
        if kind == "worker_kill":
            child = next(c for c in topo.children if c.name == f"worker-{host}")
            t = _now()
            _signal_group(child.proc, signal.SIGKILL)
            rec["recovery_s"] = self.probe(host, f"w{n}", t)
        elif kind == "scheduler_kill":
            child = next(c for c in topo.children if c.name == "scheduler")
            t = _now()
            _signal_group(child.proc, signal.SIGKILL)
            rec["recovery_s"] = self.scheduler_probe(t)
        elif kind == "drain_kill":
            t = _now()
            with self.drainers_lock:
                self.drainers[host].kill()
                self.drainers[host].wait(10)
                self.start_drainer(host)
            rec["recovery_s"] = round(_now() - t, 3)
        elif kind in ("redis_restart", "redis_kill"):
            t = _now()
            self.redis.stop(signal.SIGTERM if kind == "redis_restart" else signal.SIGKILL)
            back = self.redis.start()
            rec["down_s"] = round(back - t, 3)
            probes = [self.probe(h, f"r{n}{h}", back) for h in HOSTS]
            rec["recovery_s"] = None if None in probes else max(p for p in probes if p is not None)
        rec["t"] = t
        if isinstance(rec.get("recovery_s"), float):
            rec["recovery_s"] = round(rec["recovery_s"], 3)
        self.faults.append(rec)
        print(f"chaos: {kind} on {host}: recovery {rec.get('recovery_s')} s", flush=True)

    def fault_plan(self) -> list[str]:
        k = self.args.faults
        plan = [f for _ in range(k) for f in ("worker_kill", "scheduler_kill", "drain_kill")]
        plan += ["redis_restart"] * k + ["redis_kill"]
        random.Random(7).shuffle(plan)
        return plan

    # -- run --------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        self.setup()
        a = self.args
        offsets: dict[Path, int] = {}
        stop = threading.Event()

        def watch() -> None:
            while not stop.is_set():
                try:
                    self.poll_files(offsets)
                    self.restart_dead()
                except Exception as exc:  # keep watching; the accounting shows the effect
                    print(f"chaos: watcher: {exc!r}", file=sys.stderr)
                stop.wait(0.1)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        t0 = time.monotonic()
        senders = self.start_senders()
        plan = self.fault_plan()
        span = a.duration * 0.7
        for n, kind in enumerate(plan):
            at = t0 + a.duration * 0.15 + span * n / max(1, len(plan) - 1)
            while time.monotonic() < at:
                time.sleep(0.05)
            if time.monotonic() >= self.deadline:
                self.incidents.append(f"faults from {kind} #{n} on not run")
                break
            try:
                self.fault(kind, plan[:n].count(kind))
            except Exception as exc:  # e.g. Redis did not come back: still account
                self.incidents.append(f"{kind}: {exc!r}")
        for s in senders:
            try:
                s.wait(max(1.0, self.deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.incidents.append(f"sender pid {s.pid} still sending; killed")
                s.kill()
                s.wait(5)
        sent = self.read_sent()
        deadline = min(time.monotonic() + a.settle, self.deadline + a.settle)
        while time.monotonic() < deadline:
            with self.lock:
                n_heard = sum(1 for m in sent if m in self.heard)
            if n_heard == len(sent):
                break
            time.sleep(0.2)
        # Then the marks: a notice heard before its marks were recorded (a worker killed
        # after the listener's ack, a drainer killed after its claim) leaves them ``new``
        # until a later notice carries them again (the worker's recovery, the floor's
        # give-back within ``confirm.CARRY_AGAIN_BOUND_S``; longer on a loaded machine).
        # Wait for that, not a fixed second; the accounting counts any left at the deadline.
        time.sleep(1.0)
        while time.monotonic() < deadline and self.marks(sent).get("new", 0):
            time.sleep(1.0)
        stop.set()
        watcher.join(5)
        return self.account(sent)

    def read_sent(self) -> dict[str, tuple[str, float]]:
        sent: dict[str, tuple[str, float]] = {}
        self.resends = 0
        for path in self.base.glob("sent-*.txt"):
            for line in path.read_text().splitlines():
                parts = line.split()
                if parts[0] == "resend":
                    self.resends += 1
                elif len(parts) == 3:
                    sent[parts[0]] = (parts[1], float(parts[2]))
        return sent

    def _records(self, sid: str) -> list[dict[str, Any]]:
        store = self.bus(HOSTS[0]).store
        return [json.loads(raw) for raw in store.r.hvals(store.k.s(sid, "msgs"))]

    def marks(self, sent: dict[str, tuple[str, float]]) -> Counter[str]:
        """The marks of the sent messages' inbox records, by mark."""
        return Counter(
            rec.get("mark", "?")
            for sid in self.sessions
            for rec in self._records(sid)
            if rec.get("id") in sent
        )

    def account(self, sent: dict[str, tuple[str, float]]) -> dict[str, Any]:
        bus = self.bus(HOSTS[0])
        r, k = bus.store.r, bus.store.k
        # A store is counted by its ``inbox_received`` record, written by the same script
        # as the queue's entry (a queue the delivery took whole is emptied, so the queue
        # alone no longer shows what was delivered); a message is there if its entry is
        # still queued or its inbox record exists.
        stored: Counter[str] = Counter()
        present: set[str] = set()
        marks: Counter[str] = Counter()
        for sid in self.sessions:
            for _eid, fields in r.xrange(k.s(sid, "events")):
                if fields.get("kind") == "inbox_received":
                    stored[fields["id"]] += 1
            for _eid, fields in r.xrange(k.s(sid, "stream")):
                present.add(fields["id"])
            for rec in self._records(sid):
                present.add(str(rec.get("id")))
                if rec.get("id") in sent:
                    marks[rec.get("mark", "?")] += 1
        once = sum(1 for m in sent if stored[m] == 1 and m in present)
        twice = sum(1 for m in sent if stored[m] > 1)
        lost = sum(1 for m in sent if stored[m] == 0 or m not in present)
        windows = [(f["t"], f["t"] + FAULT_WINDOW_S) for f in self.faults]
        calm: list[float] = []
        faulty: list[float] = []
        unheard = 0
        unheard_ids: list[dict[str, Any]] = []
        by_kind: dict[str, list[float]] = {}
        for mid, (sid, t) in sent.items():
            h = self.heard.get(mid)
            if h is None:
                unheard += 1
                if len(unheard_ids) < 10:
                    unheard_ids.append({"id": mid, "sid": sid, "sent": t})
                continue
            under = any(lo <= t <= hi for lo, hi in windows)
            (faulty if under else calm).append(h - t)
            if not under:  # by kind: a socket's notice, a drained floor, a debounced wake
                by_kind.setdefault(self.sessions.get(sid, ("", "?"))[1], []).append(h - t)
        per = [self.notices[s] for s in self.sessions if not s.startswith("probe")]
        recov = [f["recovery_s"] for f in self.faults]
        return {
            "sent": len(sent),
            "resends": self.resends,
            "stored_once": once,
            "lost": lost,
            "stored_twice": twice,
            "marks_new": marks.get("new", 0),
            "marks": dict(marks),
            "not_heard": unheard,
            "heard_twice": self.heard_twice,
            "repeats_marked": self.repeats_marked,
            "repeats_dropped_sock": self.repeats_dropped(),
            "heard_twice_ids": [{**x, "fault": self.fault_before(x["again"])} for x in self.twice],
            "not_heard_ids": unheard_ids,
            "notices_per_session": {
                "min": min(per, default=0),
                "median": sorted(per)[len(per) // 2] if per else 0,
                "max": max(per, default=0),
            },
            "heard_p50_calm_s": pct(calm, 50),
            "heard_p99_calm_s": pct(calm, 99),
            "heard_calm_by_kind_s": {
                kind: {"p50": pct(xs, 50), "p99": pct(xs, 99), "n": len(xs)}
                for kind, xs in sorted(by_kind.items())
            },
            "heard_p50_faults_s": pct(faulty, 50),
            "heard_p99_faults_s": pct(faulty, 99),
            "faults": [{k2: v for k2, v in f.items() if k2 != "t"} for f in self.faults],
            "max_recovery_s": max((x for x in recov if x is not None), default=None),
            "recoveries_failed": sum(1 for x in recov if x is None),
            "supervised": getattr(self.topo, "supervisor", None) is not None,
            "incidents": self.incidents,
        }

    def repeats_dropped(self) -> int:
        """Notices the socket sessions' listeners acked but did not hand on: each carried
        only messages already handed on (bus.delivery.said)."""
        dropped = 0
        for sid, (host, kind) in self.sessions.items():
            if kind != "sock":
                continue
            d = self.bus(host).floor.session_dir(sid)
            acked = {
                str(x.get("id")) for x in heard_lines(d) if str(x.get("id")).startswith("ntc-")
            }
            dropped += max(0, len(acked) - self.notices[sid])
        return dropped

    def fault_before(self, t: float) -> dict[str, Any] | None:
        """The last fault begun by time ``t``, and how long before ``t`` (a message heard
        twice is tied to the kill that made its notice be carried again)."""
        began = [f for f in self.faults if f["t"] <= t]
        if not began:
            return None
        f = max(began, key=lambda f: f["t"])
        return {"fault": f["fault"], "host": f["host"], "before_s": round(t - f["t"], 3)}

    def close(self) -> None:
        self.closing = True  # the watcher, if still running, restarts nothing from now on
        for listener in self.listeners:
            listener.stop()
        for proc in self.drainers.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)
        if self.topo is not None:
            self.topo.stop()
        self.redis.stop()


def pct(xs: list[float], p: int) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(len(xs) * p / 100))], 3)


def report(res: dict[str, Any]) -> str:
    lines = [
        f"sent {res['sent']} (+{res['resends']} deliberate resends)",
        f"stored exactly once {res['stored_once']}, lost {res['lost']},"
        f" stored twice {res['stored_twice']}",
        f"marks still new {res['marks_new']} (marks {res['marks']}), not heard"
        f" {res['not_heard']}, heard twice by message id {res['heard_twice']}"
        f" (carried again: marked as repeats {res.get('repeats_marked', 0)},"
        f" socket notices dropped as whole repeats {res.get('repeats_dropped_sock', 0)})",
        f"notices per session {res['notices_per_session']}",
        f"send -> heard calm p50 {res['heard_p50_calm_s']} s p99 {res['heard_p99_calm_s']} s;"
        f" under faults p50 {res['heard_p50_faults_s']} s p99 {res['heard_p99_faults_s']} s",
        "  calm by kind: "
        + ", ".join(
            f"{kind} p50 {v['p50']} s p99 {v['p99']} s (n {v['n']})"
            for kind, v in res.get("heard_calm_by_kind_s", {}).items()
        ),
    ]
    for x in res.get("heard_twice_ids", []):
        f = x.get("fault")
        when = f"{f['before_s']} s after {f['fault']} on {f['host']}" if f else "before any fault"
        lines.append(
            f"  heard twice: {x['id']} on {x['sid']}, again {x['again'] - x['first']:.1f} s"
            f" after its first notice, {when}"
        )
    for what in res["incidents"]:
        lines.append(f"INCIDENT: {what}")
    for f in res["faults"]:
        extra = f" (down {f['down_s']} s)" if "down_s" in f else ""
        lines.append(f"  {f['fault']:<15} {f['host']}: recovery {f['recovery_s']} s{extra}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=180.0, help="seconds of sending")
    p.add_argument("--messages", type=int, default=20000, help="traced messages in total")
    p.add_argument("--sessions", type=int, default=54, help="sessions (sock, floor, wake)")
    p.add_argument("--senders", type=int, default=4, help="sender processes")
    p.add_argument("--faults", type=int, default=3, help="faults of each kind")
    p.add_argument("--resend", type=float, default=0.03, help="share of ids sent twice")
    p.add_argument("--settle", type=float, default=60.0, help="seconds to wait at the end")
    p.add_argument(
        "--deadline",
        type=float,
        default=0.0,
        help="seconds the sending and faults may take in all (default: duration + 300)",
    )
    p.add_argument("--keep", action="store_true", help="keep the temp dir (logs)")
    p.add_argument("--role", choices=("sender", "drainer"), help=argparse.SUPPRESS)
    p.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--rate", type=float, default=1.0, help=argparse.SUPPRESS)
    p.add_argument("--targets", default="", help=argparse.SUPPRESS)
    p.add_argument("--out", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.role == "sender":
        return role_sender(args)
    if args.role == "drainer":
        return role_drainer(args)
    args.deadline = args.deadline or args.duration + 300.0
    # Should a wait the deadline does not bound still hang (a bug), the stacks of every
    # thread go to stderr and the soak exits, rather than hanging whoever runs it.
    faulthandler.dump_traceback_later(args.deadline + args.settle + 120.0, exit=True)
    base = Path(tempfile.mkdtemp(prefix="inbox-chaos-"))
    soak = Soak(args, base)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    try:
        res = soak.run()
    finally:
        soak.close()
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
        else:
            print(f"chaos: logs in {base}", file=sys.stderr)
    print(report(res))
    print(json.dumps(res), flush=True)
    ok = res["lost"] == 0 and res["stored_twice"] == 0 and res["marks_new"] == 0
    ok = ok and not res["incidents"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
