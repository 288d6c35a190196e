"""Hosts as Linux network namespaces on one bridge: each reaches the store only over TCP.

:class:`HostNet` makes a bridge in the root namespace (the store's and the broker's side,
``gateway`` address) and, per host, a namespace with a veth pair whose root end is on
the bridge. A process started with :meth:`HostNet.wrap` runs in its host's namespace:
its only way to Redis is its veth. :meth:`cut` disables the root end's bridge port (a
black hole, as in a network partition: every link stays up and every packet leaves its
sender's stack, then the bridge drops it, both ways; TCP retransmits on its growing
timer, a connect's SYNs go unanswered), :meth:`restore` enables it again, :meth:`remove`
deletes the namespace for good.

Names carry a per-run tag, so runs of several people on one machine never collide;
:meth:`close` removes everything made. Needs root (``ip netns``); :func:`unavailable`
says why not, in words, or ``None``.
"""

from __future__ import annotations

import ipaddress
import os
import random
import shutil
import signal
import subprocess
from dataclasses import dataclass, field


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def _bridge(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bridge", *args], capture_output=True, text=True, check=True, timeout=30)


def unavailable() -> str | None:
    """Why network namespaces cannot be made here, or ``None`` when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("bridge") is None:
        return "no bridge command (iproute2), which cuts a host"
    tag = f"inbprobe{os.getpid() % 100000}"
    try:
        made = _ip("netns", "add", tag, check=False)
        if made.returncode != 0:
            return f"ip netns add failed: {made.stderr.strip()}"
        _ip("netns", "del", tag, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"the ip command did not run: {exc}"
    return None


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 in 10.0.0.0/8 that no interface here overlaps."""
    used = [
        ipaddress.IPv4Interface(word).network
        for line in _ip("-4", "-o", "addr").stdout.splitlines()
        for word in line.split()
        if "/" in word and word[0].isdigit()
    ]
    rnd = random.Random()
    for _ in range(100):
        net = ipaddress.IPv4Network(f"10.{rnd.randrange(100, 250)}.{rnd.randrange(1, 250)}.0/24")
        if not any(net.overlaps(u) for u in used):
            return net
    raise RuntimeError("no free 10.x.y.0/24 subnet for the host namespaces")


@dataclass
class HostNet:
    """A bridge plus one namespace per host; see the module docstring."""

    hosts: list[str]
    tag: str = field(default_factory=lambda: f"{random.randrange(16**4):04x}")
    subnet: ipaddress.IPv4Network = field(default_factory=_free_subnet)
    made: list[tuple[str, str]] = field(default_factory=list)  # ("netns"|"link", name)
    cut_hosts: set[str] = field(default_factory=set)

    @property
    def gateway(self) -> str:
        """The root namespace's address on the bridge: where Redis listens."""
        return str(self.subnet.network_address + 1)

    @property
    def bridge(self) -> str:
        return f"isw{self.tag}"

    def ns(self, host: str) -> str:
        return f"isw{self.tag}-{host}"

    def veth(self, host: str) -> str:
        """The root end of the host's veth pair (≤ 15 characters)."""
        return f"isw{self.tag}r{self.hosts.index(host)}"

    def address(self, host: str) -> str:
        return str(self.subnet.network_address + 10 + self.hosts.index(host))

    def up(self) -> HostNet:
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            self.made.append(("link", self.bridge))
            _ip("addr", "add", f"{self.gateway}/{self.subnet.prefixlen}", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for n, host in enumerate(self.hosts):
                ns, root_end, ns_end = self.ns(host), self.veth(host), f"isw{self.tag}n{n}"
                _ip("netns", "add", ns)
                self.made.append(("netns", ns))
                _ip("link", "add", root_end, "type", "veth", "peer", "name", ns_end)
                self.made.append(("link", root_end))
                _ip("link", "set", ns_end, "netns", ns)
                _ip("link", "set", root_end, "master", self.bridge)
                _ip("link", "set", root_end, "up")
                addr = f"{self.address(host)}/{self.subnet.prefixlen}"
                _ip("-n", ns, "addr", "add", addr, "dev", ns_end)
                _ip("-n", ns, "link", "set", ns_end, "up")
                _ip("-n", ns, "link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise
        return self

    def wrap(self, host: str, argv: list[str]) -> list[str]:
        """``argv`` run inside the host's namespace."""
        return ["ip", "netns", "exec", self.ns(host), *argv]

    def cut(self, host: str) -> None:
        """The host can no longer reach the bridge (nor anything on it): a partition.

        Its bridge port is disabled (state 0), not its link set down: with the link down
        the host's own stack would see no carrier and fail at once (no route to host),
        which a real partition never says."""
        _bridge("link", "set", "dev", self.veth(host), "state", "0")
        self.cut_hosts.add(host)

    def restore(self, host: str) -> None:
        _bridge("link", "set", "dev", self.veth(host), "state", "3")  # forwarding
        self.cut_hosts.discard(host)

    def remove(self, host: str) -> None:
        """The host's network is gone for good (its processes are the caller's to end)."""
        _ip("link", "del", self.veth(host), check=False)
        _ip("netns", "del", self.ns(host), check=False)

    def close(self) -> None:
        """Delete every namespace and link this run made (the veth peers go with them)."""
        for kind, name in reversed(self.made):
            if kind == "netns":
                _ip("netns", "del", name, check=False)
            else:
                _ip("link", "del", name, check=False)
        self.made.clear()


__all__ = ["HostNet", "unavailable"]


def ns_pids(ns: str) -> list[int]:
    """The processes in network namespace ``ns``."""
    got = subprocess.run(
        ["ip", "netns", "pids", ns], capture_output=True, text=True, check=False, timeout=30
    )
    return [int(p) for p in got.stdout.split() if p.isdigit()]


def kill_ns(ns: str) -> None:
    """SIGKILL every process in network namespace ``ns``."""
    for pid in ns_pids(ns):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
