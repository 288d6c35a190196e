"""How an idle Codex session is woken: the wake command its hooks give it.

Codex (0.171) keeps a queue of messages per thread: ``codex queue --thread <id> --message
<text>`` adds one, and a Codex that has the thread loaded and idle (the TUI, ``codex
resume``) runs it as a turn at once, with no keystroke (``turn_trigger: "queue"``). So the
``SessionStart`` hook of an interactive Codex gives its session the wake command
:func:`queue_cmd`: when the bus's wake rules wake the session, the worker runs it with the
ONE notice on stdin and the notice becomes the turn's prompt.

Plain ``codex`` runs its threads in Codex's shared background server (``codex app-server
--managed-daemon``, one per ``$CODEX_HOME``), and its hooks run as that server's children:
the window (the TUI) is not among their ancestors. ``codex queue`` reaches that server
through its control socket, so the wake command is the same; what differs is whose life
the session follows. The server outlives every window and runs no ``SessionEnd`` when a
window quits, so the hook finds the windows themselves (:func:`windows`: this user's
interactive Codex processes with the same ``$CODEX_HOME`` and folder) and keeps them as
the session's holders (bus.delivery.kept_wake): once none of them is alive the host's
worker closes the session (bus.delivery.holder_watch), as does a wake that comes first,
and no turn runs in a server nobody watches. With ``--no-daemon`` the
window is the hook's ancestor and its own holder.

A headless ``codex exec`` ends with its turn; a message queued for it would wait unheard
until the thread is resumed, so it gets no wake command from its hooks. A person gives it
one (``inbox session open <id> --wake-cmd "codex exec resume <id> -"``); the session then
stays open between its runs (:func:`closes_at_end`).

The Codex that runs the hook is found from ``/proc`` (Linux): the nearest ancestor whose
executable is named ``codex``. Where there is no ``/proc``, no wake command is given.
Where no wake command can work, :func:`plan` says why (the session's ``wake_problem``:
``inbox status``, ``inbox doctor`` and the SessionStart context show it).
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import psutil

# Options of the codex command line that take a value (the next argument).
_VALUED = frozenset(
    {
        "-c", "--config", "-p", "--profile", "-m", "--model", "-C", "--cd", "--enable",
        "--disable", "-s", "--sandbox", "-a", "--ask-for-approval", "-i", "--image",
        "--remote", "--remote-auth-token-env", "--add-dir", "--local-provider",
    }
)  # fmt: skip
# Subcommands whose process does not keep a thread loaded and idle for a queued message.
_HEADLESS = frozenset({"exec", "e", "review", "app-server", "mcp-server", "exec-server"})
# Subcommands that are no window a thread runs in (``codex --help``, 0.171): a command that
# runs and ends (``queue`` is a wake in flight), or a server.
_NO_WINDOW = _HEADLESS | frozenset(
    {
        "agents", "login", "logout", "mcp", "plugin", "remote-control", "completion",
        "update", "doctor", "sandbox", "debug", "apply", "a", "queue", "archive", "delete",
        "migrate-rollouts", "migrate-nfs-db", "unarchive", "cloud", "features", "help",
    }
)  # fmt: skip
_QUEUE = re.compile(r"\bqueue --thread \S+ --message ")
_ANCESTORS = 4


def codex_process(pid: int | None = None) -> tuple[str, list[str]] | None:
    """``(executable, argv)`` of the Codex process running this hook, or None."""
    found = codex_ancestor(pid)
    return None if found is None else (found[1], found[2])


def codex_ancestor(pid: int | None = None) -> tuple[int, str, list[str]] | None:
    """``(pid, executable, argv)`` of the Codex process running this hook, or None."""
    pid = os.getppid() if pid is None else pid
    for _ in range(_ANCESTORS):
        if pid <= 1:
            return None
        try:
            exe = os.readlink(f"/proc/{pid}/exe")
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None
        if Path(exe).name == "codex":
            return pid, exe, [a.decode(errors="replace") for a in raw.split(b"\0") if a]
        pid = int(stat.rsplit(")", 1)[1].split()[1])  # the parent's pid (field 4)
    return None


def subcommand(argv: list[str]) -> str | None:
    """The codex subcommand of ``argv`` (its first positional argument), or None."""
    args = iter(argv[1:])
    for arg in args:
        if arg == "--":
            return None
        if arg.startswith("-"):
            if arg in _VALUED:
                next(args, None)
            continue
        return arg
    return None


def is_interactive(argv: list[str]) -> bool:
    """Whether a Codex started with ``argv`` keeps its thread loaded while idle (the TUI,
    ``codex resume``/``fork``, ``codex "a prompt"``), so that a queued message runs."""
    return subcommand(argv) not in _HEADLESS


def is_daemon(argv: list[str]) -> bool:
    """Whether ``argv`` is Codex's shared background server (plain ``codex`` runs its
    threads there)."""
    return subcommand(argv) == "app-server" and "--managed-daemon" in argv


def codex_home(env: dict[str, str] | None = None) -> Path:
    """``$CODEX_HOME`` of ``env`` (default: this process's), else ``~/.codex`` under the
    ``HOME`` it names."""
    env = dict(os.environ) if env is None else env
    return Path(env.get("CODEX_HOME") or Path(env.get("HOME") or "~") / ".codex").expanduser()


def windows(home: str, cwd: str | None) -> list[tuple[int, float]]:
    """``(pid, start time)`` of this user's interactive Codex processes (the TUI) using
    ``$CODEX_HOME`` ``home`` in folder ``cwd``: the windows a thread of Codex's
    background server may be open in."""
    found: list[tuple[int, float]] = []
    uid = os.getuid()
    want = os.path.realpath(home)
    for proc in psutil.process_iter(["name", "uids", "cmdline"]):
        try:
            info = proc.info
            argv = info.get("cmdline") or []
            if info.get("name") != "codex" or not argv or info["uids"].real != uid:
                continue
            if subcommand(argv) in _NO_WINDOW:
                continue
            if cwd and os.path.realpath(cwd) not in _folders(proc.cwd(), argv):
                continue
            env = proc.environ()
            if os.path.realpath(codex_home(env)) != want:
                continue
            found.append((proc.pid, proc.create_time()))
        except (psutil.Error, OSError, KeyError, TypeError):
            continue
    return found


def _folders(cwd: str, argv: list[str]) -> set[str]:
    """The folders a Codex window works in: its own, and the one ``-C``/``--cd`` names."""
    found = {os.path.realpath(cwd)}
    for flag, value in itertools.pairwise(argv):
        if flag in ("-C", "--cd"):
            found.add(os.path.realpath(os.path.join(cwd, value)))
    for arg in argv:
        if arg.startswith("--cd="):
            found.add(os.path.realpath(os.path.join(cwd, arg[5:])))
    return found


@dataclass
class Plan:
    """What a Codex session's hooks register: its wake command (None: none can work, and
    ``problem`` says why) and the processes whose life is the session's (``holders``)."""

    cmd: str | None
    holders: list[tuple[int, float]] = field(default_factory=list)
    problem: str | None = None


def queue_cmd(exe: str, sid: str, codex_home: str) -> str:
    """The wake command that queues the notice (stdin) as a turn for thread ``sid``."""
    return (
        f"CODEX_HOME={shlex.quote(codex_home)} {shlex.quote(exe)} queue"
        f' --thread {shlex.quote(sid)} --message "$(cat)"'
    )


def is_queue_cmd(cmd: str | None) -> bool:
    return bool(cmd) and _QUEUE.search(cmd or "") is not None


def plan(
    sid: str, kept: str | None, cwd: str | None = None, env: dict[str, str] | None = None
) -> Plan:
    """The wake a Codex session opens with: one a person gave it stays; else, for an
    interactive Codex (a window, or the background server with a window open in ``cwd``),
    :func:`queue_cmd` (made again each start: the executable may have moved); else none,
    and why."""
    if kept and not is_queue_cmd(kept):
        return Plan(kept)
    found = codex_ancestor()
    if found is None:
        return Plan(None, problem=NO_CODEX)
    pid, exe, argv = found
    env = dict(os.environ) if env is None else env
    home = str(codex_home(env))
    if is_daemon(argv):
        held = windows(home, cwd)
        if not held:
            return Plan(None, problem=NO_WINDOW)
        return Plan(queue_cmd(exe, sid, home), held)
    if not is_interactive(argv):
        # A headless run ends with its turn (SessionEnd closes it): never idle to wake.
        return Plan(None)
    return Plan(queue_cmd(exe, sid, home), _started(pid))


def _started(pid: int) -> list[tuple[int, float]]:
    try:
        return [(pid, psutil.Process(pid).create_time())]
    except psutil.Error:
        return []


NO_CODEX = (
    "no Codex process was found above the hook (it reads /proc, Linux only), so nothing "
    "can wake this session when it is idle; give it one with `inbox session open <id> "
    "--wake-cmd ...`"
)
NO_WINDOW = (
    "Codex's background server runs this session but no codex window in its folder was "
    "found, so a wake would run a turn nobody sees: it is not woken; messages wait for "
    "its next turn"
)


def wake_cmd_for(sid: str, kept: str | None, env: dict[str, str] | None = None) -> str | None:
    """:func:`plan`'s wake command alone."""
    return plan(sid, kept, env=env).cmd


def closes_at_end(wake_cmd: str | None) -> bool:
    """Whether ``SessionEnd`` closes the session: yes, unless a person gave it a wake
    command (a headless session reached by ``codex exec resume`` outlives each run). A
    queue wake ends with its Codex: a message queued after it would wait unheard."""
    return not wake_cmd or is_queue_cmd(wake_cmd)


__all__ = [
    "Plan",
    "closes_at_end",
    "codex_ancestor",
    "codex_process",
    "is_daemon",
    "is_interactive",
    "is_queue_cmd",
    "plan",
    "queue_cmd",
    "subcommand",
    "wake_cmd_for",
    "windows",
]
