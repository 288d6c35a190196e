"""Processes started ahead: a killed worker's or scheduler's successor is already imported.

A Celery worker's start is mostly Python importing Celery, kombu and the bus: 2-3 s of
CPU, 8-13 s of wall time on a loaded 2-core machine, during which the host's sessions
hear nothing; the scheduler's is the command line, the bus and (for its dispatcher)
Celery: 1.8-4.7 s on the same machine, during which no wake is taken. So the supervisor
(``inbox up``, ``compose/local.py``) keeps, beside each worker and beside the scheduler,
one spare process that has done those imports and waits on its stdin: a worker's is
``python -m workers.standby``, the scheduler's ``inbox scheduler --standby``. When the
child exits, the supervisor's restart writes one line to its spare, which then runs in
that process (a worker with ``inbox worker``'s ``celery worker`` arguments, the scheduler's
loop as ``inbox scheduler`` runs it); a new spare is started :data:`SPARE_AFTER_S` later,
so its imports do not compete with the promoted one's start. Without a live spare the
restart is the cold command.

A spare takes no work and holds no claim before its line: it has not connected to
anything. Its line is written only once the child it replaces has exited (and its process
group is SIGKILLed), so one supervisor never runs two schedulers at once. A spare ends
when its stdin closes (the supervisor gone or stopping). ``INBOX_WORKER_STANDBY=0`` runs
no worker spare, ``INBOX_SCHEDULER_STANDBY=0`` no scheduler spare (default: as
``INBOX_WORKER_STANDBY``); each is one idle Python process less.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bus.core.settings import Settings

from .procs import die_with_parent

# After a (re)start the spare waits this long before it is started itself.
SPARE_AFTER_S = 5.0
GO = b"go\n"


def standby_enabled(env: Mapping[str, str] | None = None, *, scheduler: bool = False) -> bool:
    """Whether ``env`` (a child's whole environment) asks for the worker's spare, or with
    ``scheduler`` the scheduler's: :class:`Settings`' ``worker_standby`` and
    ``scheduler_standby`` as read from it."""
    settings = Settings.from_env(dict(os.environ if env is None else env))
    return settings.scheduler_standby if scheduler else settings.worker_standby


def standby_argv(concurrency: int, pool: str = "prefork", loglevel: str = "info") -> list[str]:
    """The spare's command: the imports, then ``inbox worker``'s Celery worker."""
    return [
        sys.executable,
        *("-m", "workers.standby"),
        *("--concurrency", str(concurrency), "--pool", pool, "--loglevel", loglevel),
    ]


def scheduler_standby_argv() -> list[str]:
    """The scheduler's spare: ``inbox scheduler --standby``."""
    return [sys.executable, "-m", "bus.surfaces.cli.app", "scheduler", "--standby"]


class Standby:
    """A Child's spawn function (a worker's, the scheduler's) that promotes its spare when
    it has one.

    ``cold`` starts the child from scratch; :meth:`tend` (the supervisor's poll) starts
    the spare once due and replaces a dead one; :meth:`close` ends it.
    """

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        log: Path | None,
        cold: Callable[[], subprocess.Popen[bytes]],
        *,
        after_s: float = SPARE_AFTER_S,
    ) -> None:
        self.argv, self.env, self.log, self.cold = argv, env, log, cold
        self.after_s = after_s
        self.spare: subprocess.Popen[bytes] | None = None
        self.due = time.monotonic() + after_s
        self.promoted = 0  # restarts served by a spare (for tests and the benches)

    def __call__(self) -> subprocess.Popen[bytes]:
        proc = self._promote()
        self.due = time.monotonic() + self.after_s
        return proc if proc is not None else self.cold()

    def _promote(self) -> subprocess.Popen[bytes] | None:
        spare, self.spare = self.spare, None
        if spare is None or spare.poll() is not None or spare.stdin is None:
            return None
        try:
            spare.stdin.write(GO)
            spare.stdin.flush()
        except OSError:
            spare.kill()
            return None
        self.promoted += 1
        return spare

    def tend(self, now: float | None = None) -> None:
        """Start the spare once due; a spare that exited is started again."""
        if self.spare is not None and self.spare.poll() is not None:
            self.spare = None
            self.due = time.monotonic() + self.after_s
        if self.spare is None and (now or time.monotonic()) >= self.due:
            self.spare = self._spawn()

    def _spawn(self) -> subprocess.Popen[bytes]:
        out: Any = open(self.log, "ab") if self.log is not None else None  # noqa: SIM115
        try:
            return subprocess.Popen(
                self.argv,
                env=self.env,
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=subprocess.STDOUT if out is not None else None,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        finally:
            if out is not None:
                out.close()

    def close(self) -> None:
        """End the spare (its stdin closed: it exits; killed if it does not)."""
        spare, self.spare = self.spare, None
        if spare is None:
            return
        try:
            if spare.stdin is not None:
                spare.stdin.close()
            spare.wait(5)
        except (OSError, subprocess.TimeoutExpired):
            spare.kill()
            spare.wait(5)


__all__ = [
    "SPARE_AFTER_S",
    "Standby",
    "scheduler_standby_argv",
    "standby_argv",
    "standby_enabled",
]
