"""A Celery worker as a child process, ready when Celery says so (tests and benches).

``inbox up`` and ``compose/local.py`` run workers in the foreground with their logs in
files; this is the programmatic form: start, wait for ``ready.``, stop or SIGKILL the
whole process group (the main process and its pool children).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence

from bus.core.settings import SOURCE_ROOT, Settings


def inbox_worker_argv(pool: str = "prefork", concurrency: int = 1) -> list[str]:
    """``inbox worker`` as a child command."""
    return [
        sys.executable,
        "-m",
        "bus.surfaces.cli.app",
        "worker",
        "--pool",
        pool,
        "--concurrency",
        str(concurrency),
        "--loglevel",
        "info",
    ]


class WorkerProcess:
    """A worker child for ``settings`` (its host, home and prefix)."""

    def __init__(
        self,
        settings: Settings,
        argv: Sequence[str] | None = None,
        *,
        ready_timeout: float = 60.0,
        env: dict[str, str] | None = None,
    ) -> None:
        """``env``: variables on top of the settings' (``INBOX_FAULT`` in crash tests)."""
        self.settings = settings
        self.log: deque[str] = deque(maxlen=400)
        self._ready = threading.Event()
        self.proc = subprocess.Popen(
            list(argv or inbox_worker_argv()),
            env={**settings.child_env(), **(env or {})},
            cwd=str(SOURCE_ROOT),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its own group: a Ctrl-C reaches the parent only
        )
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.monotonic() + ready_timeout
        while not self._ready.wait(0.1):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the worker did not start:\n" + "".join(list(self.log)[-40:]))

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.log.append(line)
            if " ready." in line:
                self._ready.set()

    def kill(self) -> None:
        """SIGKILL the whole worker: what a crash or an OOM kill does."""
        self._signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self, timeout: float = 20.0) -> None:
        """Stop it cleanly (SIGTERM: warm shutdown), killing it if it does not go."""
        if self.proc.poll() is not None:
            return
        self._signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass
