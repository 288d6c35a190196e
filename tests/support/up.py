"""``inbox up`` as a user starts it: a child in a session of its own, its console (stdout
and stderr together) read line by line in a thread, in a home of the test's own."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

from tests.support.paths import REPO
from tests.support.waiting import wait_for

BANNER_END = "Ctrl-C stops everything"  # the last line of the banner ``inbox up`` prints


def up_env(home: Path, host: str, **extra: str) -> dict[str, str]:
    """This process's environment without any ``INBOX_`` setting, with this home and host."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INBOX_")}
    env.update({"INBOX_HOME": str(home), "INBOX_HOST": host, "PYTHONPATH": str(REPO), **extra})
    return env


class Up:
    """``inbox up ARGS`` started; ``ready`` is set once a console line holds ``until``."""

    def __init__(self, env: dict[str, str], *args: str, until: str = BANNER_END) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bus.surfaces.cli.app", "up", *args],
            env=env,
            cwd=str(REPO),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.env = env
        self.lines: list[str] = []
        self.ready = threading.Event()
        self.until = until
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if self.until in line:
                self.ready.set()

    @property
    def text(self) -> str:
        """The console so far."""
        return "".join(self.lines)

    def line(self, pattern: str, timeout: float = 60) -> str:
        """The first console line matching ``pattern``, waited for (bounded)."""
        found = wait_for(
            lambda: next((ln for ln in self.lines if re.search(pattern, ln)), None),
            timeout=timeout,
            what=f"{pattern!r} in:\n{self.text}",
            interval=0.1,
        )
        return str(found)

    def stop(self) -> None:
        """Ctrl-C to its process group, as a terminal sends it; killed if it lingers."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
