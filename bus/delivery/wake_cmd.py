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

The command runs with the ``PATH`` its session's opener kept (bus.delivery.kept_wake)
ahead of the worker's, so the harness it names is found as where the session was opened.
How it ended goes to ``on_exit`` (its exit status; None when it could not start), which
frees a session whose wake failed (bus.delivery.notice).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping

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
    path: str | None = None,
    on_exit: Callable[[int | None], None] | None = None,
) -> subprocess.Popen[bytes] | None:
    """Start ``cmd`` with ``text`` on its stdin; the process (None when it could not start).

    Returns once the command ended or ``wait_s`` passed, whichever is first."""
    argv, shell = wake_argv(cmd)
    run_env = wake_env(os.environ if env is None else env)
    run_env["PATH"] = join_path(path, run_env.get("PATH"))
    try:
        proc = subprocess.Popen(
            argv,
            shell=shell,
            env=run_env,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its own group: the limit ends all of it
        )
    except OSError as exc:
        log.warning("wake_cmd for %s failed to start: %s", sid, exc)
        _report(on_exit, None)
        return None
    done = threading.Event()
    threading.Thread(
        target=_tend,
        args=(sid, proc, text.encode(), limit_s, done, on_exit),
        name=f"wake-cmd-{sid}",
        daemon=True,
    ).start()
    done.wait(wait_s)
    return proc


def join_path(first: str | None, then: str | None) -> str:
    """``first``'s folders, then ``then``'s not already named (a ``PATH``)."""
    seen: list[str] = []
    for part in f"{first or ''}:{then or ''}".split(":"):
        if part and part not in seen:
            seen.append(part)
    return ":".join(seen) or os.defpath


def _report(on_exit: Callable[[int | None], None] | None, code: int | None) -> None:
    if on_exit is None:
        return
    try:
        on_exit(code)
    except Exception:  # a report that fails must not take the worker's thread down
        log.exception("reporting a wake command's end failed")


def _tend(
    sid: str,
    proc: subprocess.Popen[bytes],
    data: bytes,
    limit_s: float,
    done: threading.Event,
    on_exit: Callable[[int | None], None] | None = None,
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
        _report(on_exit, proc.returncode)
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


__all__ = ["KILL_AFTER_S", "WAIT_S", "join_path", "start"]
