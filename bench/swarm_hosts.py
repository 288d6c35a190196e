"""A swarm on a Redis Cluster across hosts, each in its own network namespace, under faults.

    python bench/swarm_hosts.py [--hosts N] [--sessions-per-host N] [--messages N]
                                [--senders K] [--duration S] [--partition-s S] ...

Setup (all started by this script as root, all stopped and removed at the end):

- a bridge and, per host ``h0``..``hN-1``, a network namespace on it (tests/support/netns.py);
- the store: a 3-master Redis Cluster with one replica each, with a password, on the
  bridge; the Celery broker: a standalone Redis of its own (tests/support/cluster_nodes.py);
- per host, inside its namespace: ``inbox up`` (a supervised worker and a scheduler, as a
  user runs it) with its own ``INBOX_HOME``, reaching the store over TCP; and the host's
  harness process (bench/swarm_roles.py): socket listeners that ack, floor sessions
  drained at tool steps in running turns, idle sessions woken by their wake command;
- ``--senders`` senders on the first hosts (inside their namespaces) sending
  ``--messages`` traced messages over ``--duration`` seconds, with resends (same id),
  reply requests (the receiver's harness replies; replies are traced too), waited
  sends (``wait``, answered by the woken session's turn) and notes a session sends itself.

Faults, spread over the run: a worker SIGKILL, the workers of several hosts SIGKILLed at
once, a cluster master SIGKILLed (its replica takes over; the old node rejoins), a host's
namespace cut from the bridge for ``--partition-s`` and restored, and the last host
removed for good (its senders must learn it: send answers show its sessions ``stale``);
``--plan`` runs only some of them (bench/swarm_faults.py).

The accounting (chaos.py's, on the cluster) then says: sent, stored once, lost, stored
twice, left ``new``, notices per tool step, send → heard p50/p99 calm and under faults per
kind, recovery per fault (a failover's detection apart), Redis memory per idle session.
It ends with one JSON line; the exit code is 0 only when nothing was lost or doubled.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import chaos, cpu_share
from bench.chaos import Soak
from bench.swarm_account import account_extra, report_extra
from bench.swarm_coordinator import COORD, Coordinator, pick_lanes, progress, run_kills
from bench.swarm_coordinator import report as coordinator_report
from bench.swarm_faults import Faults, parse_plan
from bench.swarm_roles import add_role_args, role_harness, role_sender
from bus.api import Bus
from bus.core.settings import SOURCE_ROOT, Settings
from bus.ops.procs import die_with_parent
from tests.support.cluster_nodes import Broker, ReplicatedCluster, wait_for
from tests.support.netns import HostNet, kill_ns

PREFIX = "swarm"
KINDS = ("sock", "floor", "wake")


class HostsSoak(Faults, Soak):
    """chaos.Soak with its hosts in namespaces and its store on a replicated cluster."""

    def __init__(self, args: argparse.Namespace, base: Path) -> None:
        super().__init__(args, base)
        self.hosts = [f"h{i}" for i in range(args.hosts)]
        self.net = HostNet(self.hosts)
        self.cluster: ReplicatedCluster | None = None
        self.broker: Broker | None = None
        self.ups: dict[str, subprocess.Popen[bytes]] = {}
        self.harness: dict[str, subprocess.Popen[bytes]] = {}
        self.removed: dict[str, float] = {}  # host -> when
        self.gone_sent: dict[str, tuple[str, float]] = {}
        self.steps: dict[str, list[int]] = {}  # kind -> notice lines per tool step
        self.sock_lines: list[tuple[str, float]] = []  # (sid, heard at) per socket line
        # (id, sid, t, how it was heard, how first) of each hearing after the first
        self.again: list[tuple[str, str, float, str, str]] = []
        self.first_how: dict[str, str] = {}  # id -> how it was heard first ("sock", ...)
        self.buses: dict[str, Bus] = {}
        self.bus_lock = threading.Lock()
        self.t_send: tuple[float, float] = (0.0, 0.0)
        self.coord: Coordinator | None = None
        self.lanes: set[str] = set()
        self.idle: dict[str, Any] = {}

    # -- settings --------------------------------------------------------------------

    def env(self, host: str) -> dict[str, str]:
        assert self.cluster is not None and self.broker is not None
        env = {k: v for k, v in os.environ.items() if not k.startswith("INBOX_")}
        path = env.get("PYTHONPATH")
        env["PYTHONPATH"] = f"{SOURCE_ROOT}{os.pathsep}{path}" if path else str(SOURCE_ROOT)
        env.update(
            {
                "INBOX_HOST": host,
                "INBOX_HOME": str(self.base / "hosts" / host),
                "INBOX_REDIS_URL": self.cluster.url,
                "INBOX_REDIS_CLUSTER": "1",
                "INBOX_BROKER_URL": self.broker.url,
                "INBOX_KEY_PREFIX": PREFIX,
                "INBOX_WAKE_DEBOUNCE_S": str(self.args.wake_debounce),
                "INBOX_FYI_FLUSH_S": "5",
                "INBOX_RETRY_S": "2",
                "INBOX_STALE_S": str(self.args.stale_s),
                # The accounting counts stores by their events records: keep them.
                "INBOX_EVENTS_KEEP_S": "3600",
                "INBOX_SEND_RATE": "1000",
                "INBOX_SEND_BURST": "5000",
                "INBOX_DISPATCHER": "workers.dispatch:CeleryDispatcher",
            }
        )
        return env

    def settings(self, host: str) -> Settings:
        return Settings.from_env(self.env(host if host in self.hosts else self.hosts[0]))

    def bus(self, host: str) -> Bus:
        host = host if host in self.hosts else self.hosts[0]
        with self.bus_lock:
            if host not in self.buses:
                self.buses[host] = Bus(self.settings(host))
            return self.buses[host]

    def host_of(self, sid: str) -> str:
        return self.sessions[sid][0]

    # -- setup -----------------------------------------------------------------------

    def setup(self) -> None:
        a = self.args
        self.net.up()
        self.cluster = ReplicatedCluster(
            self.base / "cluster",
            self.net.gateway,
            node_timeout_ms=a.node_timeout_ms,
            memory_args=a.memory_args,
        ).start()
        self.broker = Broker(self.net.gateway, self.base / "broker", self.cluster.password)
        self.broker.start_and_wait()
        os.environ.update(
            {k: v for k, v in self.env(self.hosts[0]).items() if k.startswith("INBOX_")}
        )
        for host in self.hosts:
            (self.base / "hosts" / host).mkdir(parents=True, mode=0o700)
            self.start_up(host)
        deadline = time.monotonic() + 300
        for host in self.hosts:
            self.wait_worker_ready(host, deadline)
        for host in self.hosts:
            for i in range(a.sessions_per_host):
                self.sessions[f"{host}-{KINDS[i % 3]}{i}"] = (host, KINDS[i % 3])
            self.sessions[f"probe-{host}"] = (host, "sock")
        lanes = pick_lanes(self.sessions, self.hosts, a.lanes)
        self.lanes = set(lanes)
        if lanes:  # the coordinator's own session, on the first host
            self.bus(self.hosts[0]).open_session(COORD)
        print(f"swarm: opening {len(self.sessions)} sessions ({len(lanes)} lanes)", flush=True)
        for sid, (host, kind) in self.sessions.items():
            bus = self.bus(host)
            wake_cmd = None
            if kind == "wake":
                flag = self.base / f"wakes-{host}" / f"{sid}.wakes"
                wake_cmd = f"cat > /dev/null; echo woke >> {flag}"
            parent = COORD if sid in self.lanes else None
            bus.open_session(sid, wake_cmd=wake_cmd, parent=parent)
            if kind in ("sock", "floor"):
                bus.turn(sid, "start")
        for host in self.hosts:
            (self.base / f"wakes-{host}").mkdir()
            spec = {
                k: [s for s, (h, kk) in self.sessions.items() if h == host and kk == k]
                for k in KINDS
            }
            (self.base / f"spec-{host}.json").write_text(json.dumps(spec))
            self.start_harness(host)
        deadline = time.monotonic() + 300
        for sid, (_host, kind) in self.sessions.items():
            if kind == "sock":
                sock = self.bus(_host).floor.session_dir(sid) / "inbox.sock"
                wait_for(f"{sid}'s listener", deadline, sock.exists)
        if lanes:
            self.coord = Coordinator(self, self.hosts[0], lanes)
            self.coord.start()
            self.coord.wait_following()
            print(f"swarm: coordinator follows {len(lanes)} lanes", flush=True)
        if a.idle_sample:
            self.idle = cpu_share.swarm_sample(self)
            print(f"swarm: {cpu_share.report(self.idle)}", flush=True)

    def child(self, host: str, argv: list[str], log: Path) -> subprocess.Popen[bytes]:
        with open(log, "ab") as out:
            return subprocess.Popen(
                self.net.wrap(host, argv),
                env=self.env(host),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )

    def wait_worker_ready(self, host: str, deadline: float) -> None:
        """Until the host's worker says it is ready. If ``inbox up`` exits first, or the
        deadline passes, the error carries the ends of its log and the worker's."""
        # `inbox up` writes its worker's output to $INBOX_HOME/logs/worker.log.
        log = self.base / "hosts" / host / "logs" / "worker.log"
        up = self.ups[host]

        def ready() -> bool:
            if up.poll() is not None:
                raise _UpExited(f"exited with {up.returncode}")
            return log.exists() and " ready." in log.read_text(errors="replace")

        try:
            wait_for(f"{host}'s worker ready", deadline, ready)
        except (_UpExited, RuntimeError) as exc:
            tails = "".join(
                f"\n--- the end of {p.name} ---\n{_tail(p)}"
                for p in (self.base / f"up-{host}.log", log)
            )
            raise RuntimeError(f"{host}'s worker is not ready: {exc}{tails}") from None

    def start_up(self, host: str) -> None:
        argv = [
            sys.executable,
            "-m",
            "bus.surfaces.cli.app",
            "up",
            "--concurrency",
            str(self.args.concurrency),
        ]
        self.ups[host] = self.child(host, argv, self.base / f"up-{host}.log")

    def start_harness(self, host: str) -> None:
        argv = [
            *(sys.executable, __file__, "--role", "harness"),
            *("--targets", str(self.base / f"spec-{host}.json")),
            *("--out", str(self.base / f"heard-{host}.jsonl")),
            *("--wakes", str(self.base / f"wakes-{host}"), "--step", str(self.args.step)),
        ]
        self.harness[host] = self.child(host, argv, self.base / f"harness-{host}.log")

    def sender_hosts(self) -> list[str]:
        live = self.hosts[:-1] if len(self.hosts) > 1 else self.hosts
        return live[: max(1, (len(self.hosts) + 1) // 2)]

    def start_senders(self) -> list[subprocess.Popen[bytes]]:
        a = self.args
        targets = ",".join(f"{s}={k}" for s, (_h, k) in self.sessions.items() if "probe" not in s)
        per = a.messages // a.senders
        rate = max(1.0, per / a.duration)
        hosts = self.sender_hosts()
        procs = []
        for i in range(a.senders):
            host = hosts[i % len(hosts)]
            froms = [s for s, (h, k) in self.sessions.items() if h == host and k == "sock"]
            selves = [
                f"{s}={k}" for s, (h, k) in self.sessions.items() if h == host and "probe" not in s
            ]
            argv = [
                *(sys.executable, __file__, "--role", "sender", "--index", str(i)),
                *("--count", str(per), "--rate", str(rate), "--targets", targets),
                *("--froms", ",".join(froms), "--resend", str(a.resend)),
                *("--selves", ",".join(selves)),
                *("--out", str(self.base / f"sent-{i}.txt")),
            ]
            procs.append(self.child(host, argv, self.base / f"sender-{i}.log"))
        self.t_send = (chaos._now(), 0.0)
        for target in (run_kills, progress):
            threading.Thread(target=target, args=(self,), daemon=True).start()
        return procs

    # -- watching --------------------------------------------------------------------

    def poll_files(self, offsets: dict[Path, int]) -> None:
        for path in self.base.glob("heard-*.jsonl"):
            with open(path) as f:
                f.seek(offsets.get(path, 0))
                data = f.read()
            cut = data.rfind("\n") + 1
            offsets[path] = offsets.get(path, 0) + len(data[:cut].encode())
            for raw in data[:cut].splitlines():
                rec = json.loads(raw)
                if "sid" not in rec:
                    self.incidents.append(f"{path.name}: {rec}")
                    continue
                self.hear(rec["sid"], rec["ids"], rec["t"], rec.get("k", ""))
                with self.lock:
                    if rec.get("k") == "sock":  # a socket's lines, counted per tool step below
                        self.sock_lines.append((rec["sid"], rec["t"]))
                    elif "n" in rec:
                        self.steps.setdefault(rec["k"], []).append(int(rec["n"]))

    def hear(self, sid: str, ids: list[str], t: float, how: str = "") -> None:
        with self.lock:
            for mid in ids:
                if mid in self.heard:
                    self.again.append((mid, sid, t, how, self.first_how.get(mid, "")))
                else:
                    self.first_how.setdefault(mid, how)
        super().hear(sid, ids, t)

    def restart_dead(self) -> None:
        if self.closing:
            return
        for host in self.hosts:
            if host in self.removed:
                continue
            for procs, start in ((self.harness, self.start_harness), (self.ups, self.start_up)):
                if procs[host].poll() is not None:
                    self.incidents.append(f"{host}: a {start.__name__[6:]} exited; restarted")
                    start(host)
        if self.coord is not None:
            self.coord.tend()

    # -- accounting ------------------------------------------------------------------

    def read_sent(self) -> dict[str, tuple[str, float]]:
        """The sent messages the hosts still running must hear; those to a removed host's
        sessions not heard by then are kept apart (``gone_sent``)."""
        sent = super().read_sent()
        self.t_send = (self.t_send[0], chaos._now())
        with self.lock:
            gone = {
                m: v
                for m, v in sent.items()
                if self.host_of(v[0]) in self.removed and m not in self.heard
            }
        self.gone_sent = gone
        return {m: v for m, v in sent.items() if m not in gone}

    def account(self, sent: dict[str, tuple[str, float]]) -> dict[str, Any]:
        res = super().account(sent)
        gone = super().account(self.gone_sent) if self.gone_sent else None
        res = account_extra(self, sent, res, gone)
        if self.coord is not None:
            try:
                self.coord.catch_up(self.args.settle)
                res["coordinator"] = self.coord.account()
            except Exception as exc:  # the rest of the accounting stands
                self.incidents.append(f"coordinator accounting: {exc!r}")
        return res

    def close(self) -> None:
        self.closing = True
        if self.coord is not None:
            self.coord.stop()
        for procs in (self.harness, self.ups):
            for proc in procs.values():
                if proc.poll() is None:
                    proc.terminate()
        for procs in (self.harness, self.ups):
            for proc in procs.values():
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
        for host in self.hosts:  # anything left in a namespace (a sender, a pool child)
            kill_ns(self.net.ns(host))
        if self.cluster is not None:
            self.cluster.stop()
        if self.broker is not None:
            self.broker.stop()
        self.net.close()


class _UpExited(Exception):
    """``inbox up`` ended while its worker was awaited."""


def _tail(path: Path, limit: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-limit:]
    except OSError as exc:
        return f"(not readable: {exc.strerror})"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", type=int, default=10, help="hosts (namespaces)")
    p.add_argument("--sessions-per-host", type=int, default=100, help="sessions per host")
    p.add_argument("--messages", type=int, default=100_000, help="traced messages in total")
    p.add_argument("--senders", type=int, default=20, help="sender processes")
    p.add_argument("--duration", type=float, default=600.0, help="seconds of sending")
    p.add_argument("--partition-s", type=float, default=30.0, help="how long a host is cut")
    p.add_argument("--stale-s", type=float, default=0.0, help="INBOX_STALE_S (2x partition)")
    p.add_argument("--faults", type=int, default=2, help="single worker kills")
    p.add_argument(
        "--plan",
        type=parse_plan,
        default=None,
        help="only these faults, in this order (comma list: worker_kill, workers_kill, "
        "master_kill, partition, remove); default: all of them",
    )
    p.add_argument("--resend", type=float, default=0.03, help="share of ids sent twice")
    p.add_argument("--concurrency", type=int, default=1, help="worker processes per host")
    p.add_argument("--wake-debounce", type=float, default=2.0, help="INBOX_WAKE_DEBOUNCE_S")
    p.add_argument("--node-timeout-ms", type=int, default=5000, help="cluster-node-timeout")
    p.add_argument("--memory-args", action="store_true", help="the embedded server's settings")
    p.add_argument("--memory-sessions", type=int, default=200, help="idle sessions measured")
    p.add_argument("--memory-wait", type=float, default=90.0, help="housekeeping before measuring")
    p.add_argument("--settle", type=float, default=90.0, help="seconds to wait at the end")
    p.add_argument("--deadline", type=float, default=0.0, help="default: duration + 400")
    p.add_argument("--lanes", type=int, default=100, help="the coordinator's lanes (0: none)")
    p.add_argument("--coordinator-kills", type=int, default=2, help="coordinator SIGKILLs")
    p.add_argument("--progress-s", type=float, default=30.0, help="a progress line this often")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (logs)")
    p.add_argument("--calm", action="store_true", help="no faults (and no coordinator kills)")
    p.add_argument("--idle-sample", type=float, default=0.0, help="sample the idle swarm S s")
    p.add_argument("--pyspy", action="store_true", help="py-spy in the idle sample")
    p.add_argument("--slowlog", action="store_true", help="calls per role/script (SLOWLOG)")
    add_role_args(p)
    args = p.parse_args(argv)
    if args.role == "sender":
        return role_sender(args)
    if args.role == "harness":
        return role_harness(args)
    args.stale_s = args.stale_s or 2 * args.partition_s
    if args.calm:
        args.coordinator_kills = 0
    args.deadline = args.deadline or args.duration + 400.0
    faulthandler.dump_traceback_later(
        args.deadline + args.settle + args.memory_wait + 900.0, exit=True
    )
    base = Path(tempfile.mkdtemp(prefix="isw-"))
    soak = HostsSoak(args, base)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    try:
        if not args.messages:  # the idle sample alone
            soak.setup()
            print(json.dumps({"idle": soak.idle}), flush=True)
            return 0
        res = soak.run()
        res["memory"] = measure_memory(soak)
        res["idle"] = soak.idle
    finally:
        soak.close()
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
        else:
            print(f"swarm: logs in {base}", file=sys.stderr)
    print(chaos.report(res))
    print(report_extra(res))
    print(coordinator_report(res))
    print(json.dumps(res), flush=True)
    ok = res["lost"] == 0 and res["stored_twice"] == 0 and res["marks_new"] == 0
    ok = ok and res.get("coordinator", {}).get("missed", 0) == 0
    return 0 if ok and res["heard_again_unexplained"] == 0 else 1


def measure_memory(soak: HostsSoak) -> dict[str, Any]:
    """Open idle sessions on the first host, one message each; the cluster's memory
    (masters' ``used_memory``, keys) per session after ``--memory-wait`` of housekeeping."""
    from bench.swarm_account import idle_memory

    return idle_memory(soak)


if __name__ == "__main__":
    sys.exit(main())
