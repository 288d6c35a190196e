"""What the real-harness tests share: finding the CLIs npm installed, a bare environment,
the bus (a real worker and scheduler), and a tmux pane to drive an interactive session.
The web inbox's browser tests skip the same way without Debian's ``chromium``.

The CLIs come from npm (``.ci/run`` installs :data:`CLI_PACKAGES` under
``INBOX_TEST_CLI_DIR``, default ``~/.cache/inbox-harness-clis``). A CLI (or tmux) that is
not there skips its tests on a person's machine, and the run ends with one line naming
what was skipped and the command that installs them (tests/conftest.py). Where the CLIs
must be there (:func:`clis_required`: ``INBOX_TEST_REQUIRE_CLIS=1``, which ``.ci/run``
sets, or ``CI=true``) a missing one fails its tests instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NoReturn

import pytest

from bus.api import Bus
from bus.core.settings import Settings

INBOX = Path(sys.executable).parent / "inbox"


def cli_dir() -> Path:
    return Path(os.environ.get("INBOX_TEST_CLI_DIR") or "~/.cache/inbox-harness-clis").expanduser()


# What .ci/run installs (tests/integration/suite/test_harness_support.py checks the two agree).
CLI_PACKAGES = ("@anthropic-ai/claude-code@2.1.332", "@openai/codex@0.171.0")
# The head of every such skip's reason: tests/conftest.py finds them by it.
SKIP_HEAD = "REAL-CLI TEST SKIPPED"


def clis_required(env: Mapping[str, str] = os.environ) -> bool:
    """Whether a missing CLI fails its test: ``INBOX_TEST_REQUIRE_CLIS`` when set (``1``
    or ``0``), else whether this is CI (``CI=true``, as most CI services set it)."""
    explicit = env.get("INBOX_TEST_REQUIRE_CLIS", "").strip()
    if explicit:
        return explicit.lower() not in ("0", "false", "no")
    return env.get("CI", "").strip().lower() in ("1", "true", "yes")


def install_command(missing: str = "claude codex") -> str:
    """The commands that install what ``missing`` names (``claude``, ``codex``, ``tmux``,
    ``chromium``) where these tests look: the npm one is what .ci/run runs."""
    commands = []
    if "claude" in missing or "codex" in missing:
        commands.append(f"npm install --prefix {cli_dir()} {' '.join(CLI_PACKAGES)}")
    debian = [name for name in ("tmux", "chromium") if name in missing]
    if debian:
        commands.append(f"apt-get install {' '.join(debian)}")
    return " and ".join(f"`{c}`" for c in commands)


def missing(what: str) -> NoReturn:
    """Skip this test because ``what`` (a CLI, tmux) is not installed, or fail it where it
    must be (:func:`clis_required`)."""
    message = f"{SKIP_HEAD}: {what} is not installed"
    if clis_required():
        pytest.fail(
            f"REAL-CLI TEST FAILED: {what} is not installed, and INBOX_TEST_REQUIRE_CLIS or "
            f"CI says it must be: install it with {install_command(what)}"
        )
    pytest.skip(message)


def find_cli(name: str) -> Path:
    """The npm-installed binary ``name``; skips the test when it is missing (see
    :func:`missing`)."""
    for candidate in (cli_dir() / "node_modules" / ".bin" / name, shutil.which(name)):
        if candidate and Path(candidate).exists():
            return Path(candidate)
    missing(name)


def bare_env(home: Path, **extra: str) -> dict[str, str]:
    """A person's environment: no venv on PATH, no INBOX_* (the hooks carry those)."""
    return {
        "HOME": str(home),
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "TERM": "xterm-256color",
        "LANG": "C.UTF-8",
        **extra,
    }


def install_hooks(
    harness: str, path: Path, settings: Settings, *args: str
) -> subprocess.CompletedProcess[str]:
    """``inbox hooks <harness> --install PATH --yes`` as a person runs it."""
    done = subprocess.run(
        [str(INBOX), "hooks", harness, "--install", str(path), "--yes", *args],
        env={**settings.child_env(), "PATH": "/usr/bin:/bin", "HOME": str(path.parent)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done


def only_session(bus: Bus, timeout: float = 60.0) -> str:
    """The one session the harness opened (its id is the harness's own)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ids = bus.store.sessions.session_ids()
        if ids:
            assert len(ids) == 1, ids
            return str(ids[0])
        time.sleep(0.1)
    raise AssertionError("the harness opened no session")


class Tmux:
    """One detached tmux session running a command; keys in, screen out.

    Each runs on a tmux server of its own (``-L``), started here: a server already running
    on the machine would run the command in its own namespaces (a test suite in a network
    namespace would see its harness reach another loopback) and outlive the test."""

    def __init__(self, command: list[str], cwd: Path, env: dict[str, str]) -> None:
        if shutil.which("tmux") is None:
            missing("tmux")
        self.name = f"inbox-{uuid.uuid4().hex[:8]}"
        self.tmux = ["tmux", "-L", self.name]
        # The command runs under `env -i`: tmux would otherwise hand it the server's own.
        argv = ["env", "-i", *(f"{k}={v}" for k, v in env.items()), *command]
        subprocess.run(
            [*self.tmux, "new-session", "-d", "-s", self.name, "-x", "200", "-y", "50",
             "-c", str(cwd), *argv],
            check=True,
            timeout=30,
        )  # fmt: skip

    def type(self, text: str) -> None:
        subprocess.run(
            [*self.tmux, "send-keys", "-t", self.name, "-l", text], check=True, timeout=10
        )
        # Enter only once the prompt shows the text (a TUI takes it in as it draws).
        self.wait_screen(lambda s: text[:30] in s, 20, f"{text[:30]!r} typed")
        subprocess.run([*self.tmux, "send-keys", "-t", self.name, "Enter"], check=True, timeout=10)

    def screen(self) -> str:
        done = subprocess.run(
            [*self.tmux, "capture-pane", "-p", "-t", self.name],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return done.stdout

    def wait_screen(self, predicate: Callable[[str], bool], timeout: float, what: str) -> str:
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if predicate(screen):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; the screen:\n{screen}")
            time.sleep(0.1)

    def alive(self) -> bool:
        """Whether the command still runs (its tmux session ends with it)."""
        done = subprocess.run(
            [*self.tmux, "has-session", "-t", self.name], capture_output=True, timeout=10
        )
        return done.returncode == 0

    def close(self) -> None:
        subprocess.run([*self.tmux, "kill-server"], capture_output=True, timeout=10, check=False)
