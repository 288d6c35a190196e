"""``inbox up`` as a user starts it: a child in a session of its own, its console (stdout
and stderr together) read line by line in a thread, in a home of the test's own."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

from tests.support.paths import REPO

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
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
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
