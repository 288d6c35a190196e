"""What trusts the inbox's Codex hooks: the lines ``inbox hooks codex --install`` prints.

Codex (0.171) runs a hook that is not managed (an administrator's) only once a person
trusted it: Codex keeps, per hook, ``[hooks.state."<key>"] trusted_hash = "sha256:..."`` in
the user's ``config.toml`` (``$CODEX_HOME``, default ``~/.codex``). The key is ``<hooks
file>:<event, snake_case>:<group index>:<handler index>``; the hash is Codex's own, over the
hook's normalized definition (event, matcher, command, timeout, async, status message), so a
changed command needs trusting again. The TUI writes these when a person answers its "Hooks
need review" prompt ("Trust all and continue") or trusts them in ``/hooks``.

The installer never trusts on a person's behalf; it prints what would: the keys and hashes
as the installed Codex computes them, asked from ``codex app-server`` (JSON-RPC on stdio:
``initialize``, then ``hooks/list`` for the project's folder). Where no ``codex`` is on
PATH, or it does not answer, it prints how to trust them in Codex instead.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, TextIO

from .hooks import is_own_command

ANSWER_S = 30.0
TRUSTED = ("trusted", "managed")


def hook_entries(
    codex: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = ANSWER_S
) -> list[dict[str, Any]]:
    """The hooks Codex sees for ``cwd`` (``hooks/list``): key, command, currentHash,
    trustStatus, sourcePath... Raises OSError or TimeoutError when it does not answer."""
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"clientInfo": {"name": "inbox", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "hooks/list", "params": {"cwds": [str(cwd)]}},
    ]  # fmt: skip
    proc = subprocess.Popen(
        [codex, "app-server"],
        cwd=str(cwd),
        env=dict(os.environ) if env is None else env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    found: list[dict[str, Any]] = []
    done = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            with contextlib.suppress(ValueError):
                msg = json.loads(line)
                if isinstance(msg, dict) and msg.get("id") == 2:
                    for folder in (msg.get("result") or {}).get("data") or []:
                        found.extend(h for h in folder.get("hooks") or [] if isinstance(h, dict))
                    break
        done.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert proc.stdin is not None
        proc.stdin.write("".join(json.dumps(r) + "\n" for r in requests))
        proc.stdin.flush()
        if not done.wait(timeout):
            raise TimeoutError(f"codex app-server did not list its hooks in {timeout:g} s")
    finally:
        with contextlib.suppress(OSError):
            proc.kill()
        proc.wait(10)
    return found


def untrusted_own(entries: list[dict[str, Any]], hooks_file: Path) -> list[dict[str, Any]]:
    """The inbox's hooks from ``hooks_file`` that Codex does not run yet."""
    target = str(hooks_file.resolve())
    return [
        e
        for e in entries
        if str(e.get("sourcePath")) == target
        and is_own_command(e.get("command"), "codex")
        and e.get("trustStatus") not in TRUSTED
        and isinstance(e.get("key"), str)
        and isinstance(e.get("currentHash"), str)
    ]


def trust_toml(entries: list[dict[str, Any]]) -> str:
    """The ``config.toml`` lines that trust ``entries``."""
    return "".join(
        f"[hooks.state.{json.dumps(e['key'])}]\ntrusted_hash = {json.dumps(e['currentHash'])}\n\n"
        for e in entries
    )


def project_of(hooks_file: Path) -> Path:
    """The folder Codex loads ``hooks_file`` for: a project's ``.codex/hooks.json`` →
    the project; ``~/.codex/hooks.json`` → any folder (the home)."""
    parent = hooks_file.resolve().parent
    return parent.parent if parent.name == ".codex" else parent


def print_trust(hooks_file: Path, out: TextIO | None = None) -> None:
    """After an install: say what trusts the hooks (see the module's summary)."""
    out = out or sys.stdout
    home = os.environ.get("CODEX_HOME") or "~/.codex"
    out.write(
        "Codex runs these hooks once you trust them: start `codex` in "
        f'{project_of(hooks_file)} and choose "Trust all and continue" (or /hooks), or add '
        f"the lines below to {home}/config.toml.\n"
    )
    codex = shutil.which("codex")
    entries: list[dict[str, Any]] | None = None
    if codex:
        try:
            entries = untrusted_own(hook_entries(codex, project_of(hooks_file)), hooks_file)
        except (OSError, TimeoutError, subprocess.SubprocessError) as exc:
            out.write(f"(codex app-server did not list the hooks: {exc})\n")
    if entries is None:
        out.write(
            '[hooks.state."<hooks.json path>:<event, e.g. session_start>:0:0"]\n'
            'trusted_hash = "sha256:<what `codex app-server` hooks/list says>"\n'
        )
    elif entries:
        out.write("\n" + trust_toml(entries))
    else:
        out.write("(Codex already trusts every inbox hook in this file.)\n")


__all__ = ["hook_entries", "print_trust", "project_of", "trust_toml", "untrusted_own"]
