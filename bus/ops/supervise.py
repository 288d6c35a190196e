"""The supervisor behind ``inbox up`` and ``compose/local.py``: children that come back.

Each child (a worker, the scheduler, the embedded Redis) runs in its own session, so a
Ctrl-C in the terminal reaches only the supervisor, which then stops them in order:
workers and scheduler first, Redis last (its append-only file flushed), each stage
bounded, then SIGKILL. A child that exits is started again after a backoff (0.2 s,
doubling to 10 s; reset once it ran 10 s), with one log line each time; a worker's
restart promotes its spare, already imported, when it has one (bus.ops.standby). A worker whose
host queue holds work while it made no progress for ``INBOX_WORKER_STALL_S`` (default
10 s, :func:`bus.telemetry.liveness.stalled`) and used almost no CPU meanwhile (hung, not
starved on a saturated machine) is killed and restarted. A child exiting with one of its ``fatal`` codes (a worker refused its host)
stops everything; :attr:`Supervisor.failed` holds the code. One supervisor per home:
:class:`HomeLock` (``fcntl.flock`` on ``<home>/up.pid``).
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from bus.core.models import now_ms
from bus.store.server_probe import Progress
from bus.telemetry.liveness import host_queue, stalled

from .exit_reason import exit_reason, log_since, log_size
from .procs import die_with_parent, tree_cpu_s
from .standby import Standby

BACKOFF_START_S = 0.2
BACKOFF_MAX_S = 10.0
HEALTHY_AFTER_S = 10.0
LIVENESS_EVERY_S = 2.0
# A Celery worker can hang in its own shutdown after an unrecoverable broker error
# (kombu's restore_unacked on a Redis restart); its queue then grows with no progress.
STALL_S = 10.0


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class AlreadyRunning(RuntimeError):
    """Another supervisor holds this home's lock."""

    def __init__(self, pid: int | None, path: Path) -> None:
        self.pid = pid
        super().__init__(f"already running (pid {pid if pid else '?'}; lock {path})")


class HomeLock:
    """An exclusive ``flock`` on ``<home>/up.pid`` holding the supervisor's pid.

    The kernel drops the lock when the process dies, however it dies, so a stale file
    never blocks a restart; children do not inherit it (``close_fds``). A clean stop
    removes the file.
    """

    def __init__(self, home: Path) -> None:
        self.path = Path(home) / "up.pid"
        self._fd: IO[str] | None = None

    def acquire(self) -> HomeLock:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        while True:
            fd = open(self.path, "a+")  # noqa: SIM115 - held open for the lock's lifetime
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                fd.seek(0)
                text = fd.read().strip()
                fd.close()
                raise AlreadyRunning(int(text) if text.isdigit() else None, self.path) from None
            if self._still_named(fd):
                break
            fd.close()  # a clean stop removed the file between our open and our lock
        fd.seek(0)
        fd.truncate()
        fd.write(f"{os.getpid()}\n")
        fd.flush()
        self._fd = fd
        return self

    def _still_named(self, fd: IO[str]) -> bool:
        try:
            return os.path.samestat(os.fstat(fd.fileno()), os.stat(self.path))
        except FileNotFoundError:
            return False

    def release(self) -> None:
        """Unlock, and remove the file (a clean stop leaves no ``up.pid`` behind)."""
        if self._fd is not None:
            self.path.unlink(missing_ok=True)  # still locked: no one else holds it
            self._fd.close()
            self._fd = None


@dataclass
class Child:
    """One supervised process: how to start it, its stop stage and its current process."""

    name: str
    spawn: Callable[[], subprocess.Popen[bytes]]
    stage: int = 0  # stopped in ascending stage order: 0 workers/scheduler, 1 Redis
    host: str | None = None  # a worker's host: checked for progress
    # Exit codes that are no crash but a refusal (a worker's host served by another
    # floor, its home gone): not restarted; the supervisor stops with that code.
    fatal: dict[int, str] = field(default_factory=dict)
    log: Path | None = None
    # A worker's spare (bus.ops.standby): started by the poll, promoted by a restart.
    standby: Standby | None = None
    proc: subprocess.Popen[bytes] = field(init=False)
    started: float = 0.0
    started_ms: int = 0
    log_from: int = 0  # where this run's lines start in its log
    failures: int = 0
    restart_at: float | None = None
    # (monotonic time, CPU seconds of its process tree) at each progress check, the
    # bound's worth: what share of a core it used (bus.telemetry.liveness.stalled).
    cpu: list[tuple[float, float]] = field(default_factory=list)

    def tail(self, n: int = 2000) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:] if self.log else ""
        except OSError:
            return ""

    def start(self) -> None:
        self.log_from = log_size(self.log)
        self.proc = self.spawn()
        self.started = time.monotonic()
        self.started_ms = now_ms()
        self.restart_at = None
        self.cpu = []

    def cpu_share(self, window_s: float) -> float | None:
        """The share of a core its processes used over about the last ``window_s``
        (sampled now; ``None`` until half the window is sampled, or off Linux)."""
        used = tree_cpu_s(self.proc.pid)
        if used is None:
            return None
        now = time.monotonic()
        self.cpu.append((now, used))
        while len(self.cpu) > 2 and self.cpu[1][0] <= now - window_s:
            self.cpu.pop(0)
        t0, used0 = self.cpu[0]
        if now - t0 < window_s / 2:
            return None
        return (used - used0) / (now - t0)


def signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    """Signal a child's whole process group (a worker's pool too)."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            pass


class Supervisor:
    """Starts children (highest stage first), keeps them running, stops them in order."""

    def __init__(
        self,
        children: list[Child],
        *,
        name: str = "inbox up",
        store: Progress | None = None,
        stall_s: float | None = None,
        log: Callable[[str], None] = _log,
        record: Callable[[list[dict[str, Any]]], None] | None = None,
    ) -> None:
        """``record``: called with :meth:`rows` whenever a process starts or goes (``inbox
        up`` writes them for ``inbox status``, bus.local.up_procs)."""
        self.children = children
        self.name = name
        self.progress = store  # where each host's queue and heartbeat are read
        self.stall_s = stall_s if stall_s is not None else _stall_from_env()
        self.log = log
        self.stopping = threading.Event()
        self._next_liveness = 0.0
        # When Redis answered again after the progress check could not reach it: a worker
        # cut off with it made no progress for that long through no fault of its own.
        self._reached_ms = 0
        self._unreachable = False
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.failed: int | None = None  # a child's fatal exit code: everything stops
        self.record = record
        self._recorded: list[dict[str, Any]] | None = None

    def start(self, before_workers: Callable[[], None] | None = None) -> Supervisor:
        """Start the children, highest stage first; ``before_workers`` runs once the
        later stages (Redis) are started and before stage 0 (workers, scheduler)."""
        for child in sorted(self.children, key=lambda c: -c.stage):
            if before_workers is not None and child.stage == 0:
                before_workers()
                before_workers = None
            self._start(child)
        self._record()
        return self

    def _start(self, child: Child) -> None:
        """Start ``child``; a worker's host is marked ``starting`` first, so it is not
        called ``down`` before the worker's first beat (bus.core.status_view.beat_state)."""
        if child.host is not None and self.progress is not None:
            self.progress.mark_starting(child.host)
        child.start()

    def rows(self) -> list[dict[str, Any]]:
        """Every process this supervisor runs: itself, each child (its pid while it runs)
        and each child's spare (``standby``) while there is one."""
        out: list[dict[str, Any]] = [{"name": self.name, "role": "supervisor", "pid": os.getpid()}]
        for child in self.children:
            role = "worker" if child.host is not None else child.name
            row: dict[str, Any] = {"name": child.name, "role": role, "standby": False}
            if hasattr(child, "proc") and child.proc.poll() is None:
                row["pid"] = child.proc.pid
            if child.host is not None:
                row["host"] = child.host
            if child.log is not None:
                row["log"] = str(child.log)
            out.append(row)
            spare = child.standby.spare if child.standby is not None else None
            if spare is not None and spare.poll() is None:
                out.append(
                    {**row, "name": f"{child.name} standby", "standby": True, "pid": spare.pid}
                )
        return out

    def _record(self) -> None:
        if self.record is None:
            return
        rows = self.rows()
        if rows != self._recorded:
            self._recorded = rows
            try:
                self.record(rows)
            except OSError as exc:  # advisory: the bus runs on without it
                self.log(f"{self.name}: could not record its processes: {exc}")

    def child(self, name: str) -> Child:
        return next(c for c in self.children if c.name == name)

    def poll(self) -> None:
        """One supervision step: restart what exited (after its backoff); check progress."""
        with self._lock:
            if self.stopping.is_set():
                return
            now = time.monotonic()
            for child in self.children:
                code = child.proc.poll()
                if code is not None and code in child.fatal and self.failed is None:
                    self.failed = code
                    self.log(f"{self.name}: {child.name} exited (code {code}): {child.fatal[code]}")
                    if child.log is not None:  # its own words of why, from its log
                        for line in _last_lines(child.log, 3):
                            self.log(f"{self.name}: {child.name} said: {line}")
                    self.stopping.set()
                    return
                if code is not None and child.restart_at is None:
                    ran = now - child.started
                    child.failures = 0 if ran >= HEALTHY_AFTER_S else child.failures + 1
                    delay = min(BACKOFF_MAX_S, BACKOFF_START_S * 2 ** max(0, child.failures - 1))
                    child.restart_at = now + delay
                    self.log(
                        f"{self.name}: {child.name} exited (code {code}) after {ran:.1f} s"
                        f"{self._why(child, code)}; restarting in {delay:.1f} s"
                    )
                if child.restart_at is not None and now >= child.restart_at:
                    signal_group(child.proc, signal.SIGKILL)  # leftovers of its group
                    try:
                        self._start(child)
                    except Exception as exc:  # e.g. Redis did not answer in time: try later
                        child.failures += 1
                        child.restart_at = now + BACKOFF_MAX_S
                        self.log(f"{self.name}: {child.name} did not start: {exc}")
                if child.standby is not None and child.restart_at is None:
                    child.standby.tend(now)
            if self.progress is not None and self.stall_s > 0 and now >= self._next_liveness:
                self._next_liveness = now + LIVENESS_EVERY_S
                self._check_progress()
            self._record()

    @staticmethod
    def _why(child: Child, code: int) -> str:
        """``: <its reason>`` from the lines its log gained this run, or nothing. Not for
        a child a signal ended (a negative code: killed, by an operator or the OOM
        killer): an error it logged and recovered from earlier is not why it went."""
        if child.log is None or code < 0:
            return ""
        reason = exit_reason(log_since(child.log, child.log_from))
        return f": {reason}" if reason else ""

    def _check_progress(self) -> None:
        assert self.progress is not None
        for child in self.children:
            if child.host is None or child.restart_at is not None:
                continue
            found = self.progress.of(host_queue(child.host), child.host)
            if found is None:
                self._unreachable = True
                return  # Redis away: nothing to judge progress by
            if self._unreachable:
                self._unreachable, self._reached_ms = False, now_ms()
            queued, progress_ms, ready = found
            if stalled(
                queued=queued,
                progress_ms=progress_ms,
                # The bound counts from the later of its start and Redis answering again.
                started_ms=max(child.started_ms, self._reached_ms),
                now=now_ms(),
                bound_s=self.stall_s,
                # The worker writes "started" once ready (workers.tasks, worker_ready).
                booted=ready is not None and ready >= child.started_ms,
                cpu_share=child.cpu_share(self.stall_s),
            ):
                self.log(
                    f"{self.name}: {child.name} holds {queued} queued but made no progress"
                    f" for {self.stall_s:.0f} s; restarting it"
                )
                signal_group(child.proc, signal.SIGKILL)

    def run(self, stop: threading.Event, every_s: float = 0.2) -> None:
        """Supervise in this thread until ``stop`` is set, then stop every child."""
        try:
            while not stop.wait(every_s) and self.failed is None:
                self.poll()
        finally:
            self.stop()

    def run_in_background(self, every_s: float = 0.2) -> Supervisor:
        def loop() -> None:
            while not self.stopping.wait(every_s):
                self.poll()

        self._thread = threading.Thread(target=loop, name="supervisor", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM stage by stage (workers and scheduler, then Redis); SIGKILL past ``timeout``."""
        with self._lock:
            self.stopping.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5)
        for child in self.children:
            if child.standby is not None:
                child.standby.close()
        for stage in sorted({c.stage for c in self.children}):
            group = [c for c in self.children if c.stage == stage and hasattr(c, "proc")]
            for child in group:
                signal_group(child.proc, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            for child in group:
                try:
                    child.proc.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    self.log(f"{self.name}: {child.name} did not stop in {timeout:.0f} s; killing")
                    signal_group(child.proc, signal.SIGKILL)
                    child.proc.wait(5)
                # A worker's pool children share its group; none may outlive it.
                signal_group(child.proc, signal.SIGKILL)


def _stall_from_env() -> float:
    raw = os.environ.get("INBOX_WORKER_STALL_S", "")
    try:
        return float(raw) if raw else STALL_S
    except ValueError:
        return STALL_S


def _last_lines(path: Path, n: int) -> list[str]:
    """The last ``n`` non-empty lines of a log (its last 8 KB), or none if unreadable."""
    try:
        with path.open("rb") as f:
            f.seek(max(0, f.seek(0, 2) - 8192))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    return [ln for ln in text.splitlines() if ln.strip()][-n:]


def spawn_logged(argv: list[str], env: dict[str, str], log: Path | None) -> Callable[..., Any]:
    """A spawn function: ``argv`` in its own session, output appended to ``log``."""

    def spawn() -> subprocess.Popen[bytes]:
        out: Any = open(log, "ab") if log is not None else None  # noqa: SIM115
        try:
            return subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT if out is not None else None,
                # Own session: a terminal's Ctrl-C reaches only the supervisor.
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        finally:
            if out is not None:
                out.close()

    return spawn


__all__ = ["AlreadyRunning", "Child", "HomeLock", "Supervisor", "signal_group", "spawn_logged"]
