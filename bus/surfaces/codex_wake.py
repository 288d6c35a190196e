"""How an idle Codex session is woken: the wake command its hooks give it.

Codex (0.171) keeps a queue of messages per thread: ``codex queue --thread <id> --message
<text>`` adds one, and a Codex that has the thread loaded and idle (the TUI, ``codex
resume``) runs it as a turn at once, with no keystroke (``turn_trigger: "queue"``). So the
``SessionStart`` hook of an interactive Codex gives its session the wake command
:func:`queue_cmd`: when the bus's wake rules wake the session, the worker runs it with the
ONE notice on stdin and the notice becomes the turn's prompt.

A headless ``codex exec`` ends with its turn; a message queued for it would wait unheard
until the thread is resumed, so it gets no wake command from its hooks. A person gives it
one (``inbox session open <id> --wake-cmd "codex exec resume <id> -"``); the session then
stays open between its runs (:func:`closes_at_end`).

The Codex that runs the hook is found from ``/proc`` (Linux): the nearest ancestor whose
executable is named ``codex``. Where there is no ``/proc``, no wake command is given.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

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
_QUEUE = re.compile(r"\bqueue --thread \S+ --message ")
_ANCESTORS = 4


def codex_process(pid: int | None = None) -> tuple[str, list[str]] | None:
    """``(executable, argv)`` of the Codex process running this hook, or None."""
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
            return exe, [a.decode(errors="replace") for a in raw.split(b"\0") if a]
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


def queue_cmd(exe: str, sid: str, codex_home: str) -> str:
    """The wake command that queues the notice (stdin) as a turn for thread ``sid``."""
    return (
        f"CODEX_HOME={shlex.quote(codex_home)} {shlex.quote(exe)} queue"
        f' --thread {shlex.quote(sid)} --message "$(cat)"'
    )


def is_queue_cmd(cmd: str | None) -> bool:
    return bool(cmd) and _QUEUE.search(cmd or "") is not None


def wake_cmd_for(sid: str, kept: str | None, env: dict[str, str] | None = None) -> str | None:
    """The wake command a Codex session opens with: one a person gave it stays; else, for
    an interactive Codex, :func:`queue_cmd` (made again each start: the executable may have
    moved); else none."""
    if kept and not is_queue_cmd(kept):
        return kept
    found = codex_process()
    if found is None or not is_interactive(found[1]):
        return None
    env = dict(os.environ) if env is None else env
    home = env.get("CODEX_HOME") or str(Path("~/.codex").expanduser())
    return queue_cmd(found[0], sid, home)


def closes_at_end(wake_cmd: str | None) -> bool:
    """Whether ``SessionEnd`` closes the session: yes, unless a person gave it a wake
    command (a headless session reached by ``codex exec resume`` outlives each run). A
    queue wake ends with its Codex: a message queued after it would wait unheard."""
    return not wake_cmd or is_queue_cmd(wake_cmd)


__all__ = [
    "closes_at_end",
    "codex_process",
    "is_interactive",
    "is_queue_cmd",
    "queue_cmd",
    "subcommand",
    "wake_cmd_for",
]
