"""Flower for the workers (``inbox flower``), always with authentication.

Credentials, in order: the ``basic_auth`` argument (``user:password``), the
``INBOX_FLOWER_AUTH`` environment variable, else a generated ``inbox:<token>`` written
to ``$INBOX_HOME/flower.auth`` (0600). The password is never printed.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
from pathlib import Path

from bus.core.errors import BadInput
from bus.core.settings import Settings
from bus.local.private_files import write_private

from .procs import die_with_parent

AUTH_FILE = "flower.auth"
DEFAULT_USER = "inbox"
# The directory holding the ``bus`` and ``workers`` packages, for ``-A workers``.


def check_auth(auth: str) -> str:
    """``user:password`` (comma-separated for several); a BadInput otherwise."""
    for pair in auth.split(","):
        user, sep, password = pair.partition(":")
        if not sep:
            raise BadInput("flower basic auth must look like user:password (no ':' found)")
        if not user or not password:
            raise BadInput("flower basic auth needs both a user and a password")
    return auth


def flower_argv(settings: Settings, address: str, port: int) -> list[str]:
    """The command that runs Flower for this bus's broker. The credentials are not in it
    (any local user can read a process's arguments): flower_env passes them."""
    del settings  # the broker reaches Celery through the environment (flower_env)
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "workers",
        "flower",
        f"--address={address}",
        f"--port={int(port)}",
    ]


def flower_env(
    settings: Settings, base: dict[str, str] | None = None, *, auth: str | None = None
) -> dict[str, str]:
    """The environment that points ``celery -A workers`` at this bus's broker and prefix,
    with Flower's basic auth (``FLOWER_BASIC_AUTH``, which Flower reads at start)."""
    env = settings.child_env(base)
    env["INBOX_BROKER_URL"] = settings.celery_broker_url()
    if auth is not None:
        env["FLOWER_BASIC_AUTH"] = check_auth(auth)
    return env


def write_auth_file(home: Path, auth: str) -> Path:
    """Write ``auth`` to ``home/flower.auth``, 0600 from the first byte, replacing any old one."""
    os.makedirs(home, mode=0o700, exist_ok=True)
    return write_private(home / AUTH_FILE, auth + "\n")  # whole, 0600, never through a link


def resolve_auth(settings: Settings, basic_auth: str | None) -> str:
    """The credential to run with; generates and stores one when none is given."""
    if basic_auth is not None:
        return check_auth(basic_auth)
    from_env = os.environ.get("INBOX_FLOWER_AUTH")
    if from_env:
        return check_auth(from_env)
    auth = f"{DEFAULT_USER}:{secrets.token_urlsafe(12)}"  # 16 characters
    path = write_auth_file(settings.home, auth)
    print(f"flower: user {DEFAULT_USER}, password in {path}", flush=True)
    return auth


def run_flower(
    settings: Settings,
    *,
    address: str = "127.0.0.1",
    port: int = 5555,
    basic_auth: str | None = None,
) -> int:
    """Run Flower in a child process until it exits; returns its exit code.

    Stopping this process stops the child: SIGTERM and Ctrl-C are passed on (then a kill
    after 10 s), and on Linux the child gets SIGTERM if this process dies outright."""
    auth = resolve_auth(settings, basic_auth)
    proc = subprocess.Popen(
        flower_argv(settings, address, port),
        env=flower_env(settings, auth=auth),
        preexec_fn=die_with_parent,  # only a prctl call: nothing imported or locked
    )

    def stop(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        try:
            return proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)


__all__ = ["check_auth", "flower_argv", "flower_env", "resolve_auth", "run_flower"]
