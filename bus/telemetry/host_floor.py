"""One host, one floor: a host's deliveries land in one ``INBOX_HOME`` on one machine.

Every worker of host H writes H's sessions' notices to its own floor (the files under
its ``INBOX_HOME``). A second worker for H with another home, or on another machine,
would silently take part of H's deliveries to a floor no harness drains. So a worker
claims H before it takes any work (``P:hostclaim:<H>``, ``host_claim.lua``): the claim
names its floor (machine and home) and lives :data:`CLAIM_TTL_S`, renewed every
:data:`RENEW_EVERY_S`. A worker of another floor is refused while the claim lives
(:class:`HostTaken`, exit code 5, one line saying who holds it; the refusal is kept an
hour for ``inbox status`` and ``/health``). Workers of the same floor share the claim.

While it serves, the worker checks its home at every renewal: once the directory is
gone, or replaced by another one (a new inode), the worker stops taking work for it
(exit code 6) and gives the claim up. The same happens if its claim was lost (Redis
unreachable past the TTL while another floor's worker claimed the host).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bus.core.errors import Refused
from bus.core.models import now_ms
from bus.core.status_view import floor_json, split_floor
from bus.local.private_files import private_dirs
from bus.store.redis_errors import CONNECTION_ERRORS, StoreError

if TYPE_CHECKING:
    from bus.store.store import Store

log = logging.getLogger(__name__)

CLAIM_TTL_S = 10.0
RENEW_EVERY_S = 2.0
EXIT_HOST_TAKEN = 5
EXIT_HOME_GONE = 6


class HostTaken(Refused):
    """Another floor (another ``INBOX_HOME`` or machine) already serves this host."""

    code = "host_taken"
    exit_code = EXIT_HOST_TAKEN


def machine_name() -> str:
    """This machine's name as the claim records it."""
    return socket.gethostname() or "localhost"


def floor_id(machine: str, home: Path | str) -> str:
    """The floor a worker delivers to: its machine and its home's absolute path."""
    return f"{machine}\t{os.path.abspath(os.fspath(home))}"


@dataclass(frozen=True)
class HomeId:
    """A directory's identity: the same path made anew is another directory."""

    dev: int
    ino: int


def home_id(home: Path | str) -> HomeId | None:
    """``home``'s identity, ``None`` when it is not a directory (gone)."""
    try:
        st = os.stat(home)
    except OSError:
        return None
    if not os.path.isdir(home):
        return None
    return HomeId(st.st_dev, st.st_ino)


def stop_reason(
    *, started: HomeId | None, now: HomeId | None, holder: dict[str, str] | None
) -> str | None:
    """Why a serving worker must stop, or ``None``: its home vanished (``home_gone``) or
    was replaced (``home_replaced``), or another floor holds the claim (``host_taken``)."""
    if now is None:
        return "home_gone"
    if started is not None and now != started:
        return "home_replaced"
    if holder is not None:
        return "host_taken"
    return None


def refusal_text(host: str, mine: str, holder: dict[str, str]) -> str:
    """The one line a refused worker says."""
    machine, home = split_floor(holder.get("floor", ""))
    my_machine, my_home = split_floor(mine)
    where = f"INBOX_HOME {home}" + ("" if machine == my_machine else f" on machine {machine}")
    pid = holder.get("pid") or "?"
    return (
        f"host {host} is already served by a worker (pid {pid}, {where}); this worker "
        f"(INBOX_HOME {my_home} on machine {my_machine}) would deliver part of its messages "
        "to a floor no harness drains, so it does not serve it: stop the other worker (a "
        f"stopped worker's claim lapses within {CLAIM_TTL_S:.0f} s), or give this one its "
        "own INBOX_HOST"
    )


class HostFloor:
    """A worker's claim on its host, kept while it serves (see the module)."""

    def __init__(
        self,
        store: Store,
        host: str,
        home: Path,
        *,
        machine: str | None = None,
        ttl_s: float = CLAIM_TTL_S,
        on_stop: Callable[[str], None] | None = None,
    ) -> None:
        self.store = store
        self.host = host
        self.home = Path(home)
        self.floor = floor_id(machine or machine_name(), home)
        self.pid = os.getpid()
        self.ttl_ms = int(ttl_s * 1000)
        self.on_stop = on_stop or _terminate_self
        self.started: HomeId | None = None
        self.stopped: str | None = None  # why it stopped serving
        self._stop = threading.Event()

    def claim(self) -> HostFloor:
        """Claim the host for this floor, or raise :class:`HostTaken` (recorded)."""
        self.started = home_id(self.home)
        holder = self.store.schedule.claim_host(self.host, self.floor, self.pid, self.ttl_ms)
        if holder is None:
            return self
        text = refusal_text(self.host, self.floor, holder)
        try:
            self.store.schedule.record_refusal(
                self.host,
                {
                    "floor": self.floor,
                    "pid": self.pid,
                    "at": now_ms(),
                    "holder": holder["floor"],
                    "holder_pid": holder["pid"],
                },
            )
        except StoreError:
            pass
        raise HostTaken(text, host=self.host, holder=floor_json(holder))

    def check(self) -> str | None:
        """Renew the claim and look at the home; why to stop serving, or ``None``."""
        now = home_id(self.home)
        holder = None
        if now is not None and now == self.started:
            try:
                holder = self.store.schedule.claim_host(
                    self.host, self.floor, self.pid, self.ttl_ms
                )
            except StoreError:
                return None  # Redis away: the claim is renewed once it answers
        return stop_reason(started=self.started, now=now, holder=holder)

    def start(self, every_s: float = RENEW_EVERY_S) -> HostFloor:
        """Renew in a background thread; on a stop reason, log it and call ``on_stop``."""

        def loop() -> None:
            while not self._stop.wait(every_s):
                reason = self.check()
                if reason is None:
                    continue
                self.stopped = reason
                log.error("worker for host %s stops serving it: %s", self.host, _why(self, reason))
                self.release()
                self.on_stop(reason)
                return

        threading.Thread(target=loop, name=f"hostfloor-{self.host}", daemon=True).start()
        return self

    def release(self) -> None:
        """Stop renewing and give the claim up (if this process still holds it)."""
        self._stop.set()
        try:
            self.store.schedule.release_host(self.host, self.floor, self.pid)
        except StoreError:
            pass  # it expires by itself

    @property
    def exit_code(self) -> int:
        """0 while it serves; the exit code of why it stopped serving, else."""
        if self.stopped is None:
            return 0
        return EXIT_HOST_TAKEN if self.stopped == "host_taken" else EXIT_HOME_GONE


def _why(floor: HostFloor, reason: str) -> str:
    home = floor.home
    return {
        "home_gone": f"its INBOX_HOME {home} is gone",
        "home_replaced": f"its INBOX_HOME {home} was replaced by another directory",
        "host_taken": "another floor's worker holds the host now",
    }[reason]


def _terminate_self(_reason: str) -> None:
    # The worker's warm shutdown: it takes no more tasks and finishes the running ones.
    os.kill(os.getpid(), signal.SIGTERM)


def claim_floor(store: Store, host: str, home: Path, *, wait_s: float = 60.0) -> HostFloor:
    """Claim ``host`` for this process and ``home`` (:class:`HostTaken` if another floor
    serves it) and keep renewing it; Redis not answering is waited for up to ``wait_s``."""
    private_dirs(home)  # the floor's root, made here so that its identity is known
    floor = HostFloor(store, host, home)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            floor.claim()
            break
        except CONNECTION_ERRORS:
            # Redis not up yet (a worker started with it): the broker would be waited
            # for too; nothing is served before the claim is made.
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    return floor.start()
