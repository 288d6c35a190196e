"""Running a session's wake command: started, handed the notice, and left to run.

A wake command starts a harness's turn (``codex exec resume <id> -``, ``claude -p``), which
takes as long as the turn: minutes, not the seconds a delivery may hold its session. So
:func:`start` starts the command in a process group of its own, with the notice on its
stdin and none of the bus's secrets (bus.trust.rules.wake_env), waits for it at most
``wait_s`` (a quick command, a script that only records the wake, is over by then), and
otherwise leaves it to run: a thread of the worker writes the rest of the notice, reaps the
command when it ends and, once ``limit_s`` has passed, ends its whole group (SIGTERM, then
SIGKILL after ``KILL_AFTER_S``). No process is left behind as a zombie or runs past the
limit while its worker lives; a worker that stops leaves its running commands to end on
their own (their parent is then init, which reaps them).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
from collections.abc import Mapping

from bus.trust.rules import wake_argv, wake_env

log = logging.getLogger(__name__)

# How long the delivery waits for a wake command before it leaves it running.
WAIT_S = 1.0
# After the limit's SIGTERM, the group gets this long before SIGKILL.
KILL_AFTER_S = 5.0


def start(
    sid: str,
    cmd: str,
    text: str,
    *,
    limit_s: float,
    wait_s: float = WAIT_S,
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes] | None:
    """Start ``cmd`` with ``text`` on its stdin; the process (None when it could not start).

    Returns once the command ended or ``wait_s`` passed, whichever is first."""
    argv, shell = wake_argv(cmd)
    try:
        proc = subprocess.Popen(
            argv,
            shell=shell,
            env=wake_env(os.environ if env is None else env),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its own group: the limit ends all of it
        )
    except OSError as exc:
        log.warning("wake_cmd for %s failed to start: %s", sid, exc)
        return None
    done = threading.Event()
    threading.Thread(
        target=_tend,
        args=(sid, proc, text.encode(), limit_s, done),
        name=f"wake-cmd-{sid}",
        daemon=True,
    ).start()
    done.wait(wait_s)
    return proc


def _tend(
    sid: str, proc: subprocess.Popen[bytes], data: bytes, limit_s: float, done: threading.Event
) -> None:
    """The notice onto stdin (then EOF), the command reaped, ended at its limit."""
    try:
        try:
            proc.communicate(data, timeout=limit_s)
        except subprocess.TimeoutExpired:
            log.warning("wake_cmd for %s still running after %g s; ending it", sid, limit_s)
            _end_group(proc)
        except OSError as exc:  # stdin closed early is not an error of the command
            log.debug("wake_cmd for %s: %s", sid, exc)
            proc.wait()
        if proc.returncode:
            log.warning("wake_cmd for %s exited %s", sid, proc.returncode)
    finally:
        done.set()


def _end_group(proc: subprocess.Popen[bytes]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(KILL_AFTER_S)
            return
        except subprocess.TimeoutExpired:
            continue
    proc.wait()


__all__ = ["KILL_AFTER_S", "WAIT_S", "start"]
