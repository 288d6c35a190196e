"""The faults of ``bench/swarm_hosts.py``: what each does to the hosts, and their plan.

:class:`Faults` is a mixin of :class:`bench.swarm_hosts.HostsSoak`. Each fault records
its kind, its host and its recovery: the time from the fault's end (a partition's
restore, a failover's promotion) or its start (a kill) until the host's probe session
heard a message sent to it (chaos.Soak's ``probe``).

Kinds (``--plan`` takes a comma list of them, run in that order):

- ``worker_kill``: SIGKILL of one host's worker (``inbox up`` starts it again);
- ``workers_kill``: the workers of half the hosts (at least two) SIGKILLed at once;
- ``master_kill``: SIGKILL of the cluster master holding the first host's probe session
  (its replica takes over; the old node rejoins as a replica);
- ``partition``: a host's namespace cut from the bridge for ``--partition-s``, restored;
- ``remove``: the last host removed for good (its recovery is the accounting's: when
  senders learned its sessions ``stale``).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import chaos
from tests.support.netns import kill_ns, ns_pids

if TYPE_CHECKING:
    from bus.api import Bus
    from tests.support.cluster_nodes import ReplicatedCluster
    from tests.support.netns import HostNet

FAULT_KINDS = ("worker_kill", "workers_kill", "master_kill", "partition", "remove")


def parse_plan(text: str) -> list[str]:
    """``--plan``'s comma list of fault kinds, in order; an unknown kind is refused."""
    plan = [k.strip() for k in text.split(",") if k.strip()]
    bad = [k for k in plan if k not in FAULT_KINDS]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown fault kind(s) {bad}; kinds: {FAULT_KINDS}")
    return plan


def default_plan(hosts: int, worker_kills: int) -> list[str]:
    """The full run's faults: a worker kill, a partition, a host removed (with more than
    one host), a master failover, several workers killed, then the other worker kills."""
    plan = ["worker_kill", "partition"]
    if hosts > 1:
        plan.append("remove")
    plan += ["master_kill", "workers_kill"]
    return plan + ["worker_kill"] * max(0, worker_kills - 1)


class Faults:
    """The faults of a :class:`~bench.swarm_hosts.HostsSoak` (see the module docstring)."""

    args: argparse.Namespace
    hosts: list[str]
    net: HostNet
    cluster: ReplicatedCluster | None
    ups: dict[str, subprocess.Popen[bytes]]
    removed: dict[str, float]
    faults: list[dict[str, Any]]

    if TYPE_CHECKING:  # HostsSoak's and chaos.Soak's (a stub here would hide them)

        def bus(self, host: str) -> Bus: ...

        def probe(
            self, host: str, label: str, t_fault: float, timeout: float = 90.0
        ) -> float | None: ...

    def live_hosts(self) -> list[str]:
        return [h for h in self.hosts if h not in self.removed and h not in self.net.cut_hosts]

    def kill_worker(self, host: str) -> None:
        """SIGKILL the worker ``inbox up`` runs on ``host`` (its process group: the pool too)."""
        up = self.ups[host].pid
        parents: dict[int, int] = {}
        workers = []
        for pid in ns_pids(self.net.ns(host)):
            try:
                stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            parents[pid] = int(stat[1])
            if int(stat[1]) == up and b"worker" in cmd:
                workers.append(pid)
        # The worker, not its spare (bus.ops.standby, idle: no pool processes yet).
        busy = [w for w in workers if w in parents.values()]
        if not (busy or workers):
            raise RuntimeError(f"no worker found on {host}")
        os.killpg((busy or workers)[0], signal.SIGKILL)

    def probes(self, hosts: list[str], label: str, t: float) -> float | None:
        got: dict[str, float | None] = {}
        threads = [
            threading.Thread(target=lambda h=h: got.__setitem__(h, self.probe(h, f"{label}{h}", t)))
            for h in hosts
        ]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        values = list(got.values())
        return None if None in values or not values else max(v for v in values if v is not None)

    def fault(self, kind: str, n: int) -> None:
        assert self.cluster is not None
        live = self.live_hosts()
        rec: dict[str, Any] = {"fault": kind, "host": "-"}
        t = chaos._now()
        if kind == "worker_kill":
            host = live[(n * 3 + 1) % len(live)]
            rec["host"] = host
            self.kill_worker(host)
            rec["recovery_s"] = self.probe(host, f"w{n}", t)
        elif kind == "workers_kill":
            hosts = live[: max(2, len(live) // 2)]
            rec["host"] = ",".join(hosts)
            for host in hosts:
                self.kill_worker(host)
            rec["recovery_s"] = self.probes(hosts, f"ww{n}", t)
        elif kind == "master_kill":
            node = self.cluster.master_of(
                self.bus(live[0]).store.k.s(f"probe-{live[0]}", "session")
            )
            rec["host"] = f"node:{node.port}"
            dead = self.cluster.kill_master(node)
            promoted = self.cluster.wait_promoted(dead)
            back = chaos._now()
            rec["failover_s"] = round(back - t, 3)
            rec["recovery_s"] = self.probes(live, f"m{n}", back)
            rec["outage_s"] = round(back - t + (rec["recovery_s"] or 0), 3)
            rec["until"] = back + (rec["recovery_s"] or 0)
            rec["promoted"] = promoted.port
            self.cluster.restart_node(node)  # it rejoins as a replica
        elif kind == "partition":
            host = live[min(1, len(live) - 1)]
            rec["host"] = host
            self.net.cut(host)
            time.sleep(self.args.partition_s)
            self.net.restore(host)
            back = chaos._now()
            rec["cut_s"] = round(back - t, 3)
            rec["recovery_s"] = self.probe(host, f"p{n}", back)
            rec["until"] = back
        elif kind == "remove":
            host = self.hosts[-1]
            rec["host"] = host
            self.removed[host] = t
            kill_ns(self.net.ns(host))
            self.net.remove(host)
            rec["recovery_s"] = None  # filled in by the accounting (when senders learned it)
        rec["t"] = t
        rec.setdefault("until", t)
        if isinstance(rec.get("recovery_s"), float):
            rec["recovery_s"] = round(rec["recovery_s"], 3)
        self.faults.append(rec)
        print(f"swarm: {kind} on {rec['host']}: recovery {rec.get('recovery_s')} s", flush=True)

    def fault_plan(self) -> list[str]:
        if self.args.calm:
            return []
        if self.args.plan is not None:
            return list(self.args.plan)
        return default_plan(len(self.hosts), self.args.faults)


__all__ = ["FAULT_KINDS", "Faults", "default_plan", "parse_plan"]
