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
PATH, or it does not answer, it prints how to trust them in Codex instead. Codex lists a
project's hooks only once the project is trusted, so for a project it does not trust yet
the hashes are asked of a Codex whose config trusts just that project (a throwaway
``$CODEX_HOME``), and the lines printed trust the project too: pasted in the order the
docs give (install, then these lines), the hooks run at the first start.

``--uninstall`` takes the inbox's trust tables out of ``config.toml`` again
(:func:`drop_trust`), by the keys the inbox's hooks had in the file before it was changed
(:func:`own_keys`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, TextIO

from .codex_wake import codex_home
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


def is_project_file(hooks_file: Path, env: dict[str, str] | None = None) -> bool:
    """Whether ``hooks_file`` is a project's (``<project>/.codex/hooks.json``), not the
    user's own ``$CODEX_HOME/hooks.json``."""
    parent = hooks_file.resolve().parent
    return parent.name == ".codex" and parent != codex_home(env).resolve()


def _listed(codex: str, hooks_file: Path) -> tuple[list[dict[str, Any]], bool]:
    """The inbox's untrusted hooks of ``hooks_file`` as Codex lists them, and whether the
    project had to be trusted for the listing (Codex does not trust it yet)."""
    project = project_of(hooks_file)
    target = str(hooks_file.resolve())
    entries = hook_entries(codex, project)
    if any(str(e.get("sourcePath")) == target for e in entries) or not is_project_file(hooks_file):
        return untrusted_own(entries, hooks_file), False
    with tempfile.TemporaryDirectory(prefix="inbox-codex-") as tmp:
        Path(tmp, "config.toml").write_text(_project_toml(project))
        entries = hook_entries(codex, project, env={**os.environ, "CODEX_HOME": tmp})
    return untrusted_own(entries, hooks_file), True


def _project_toml(project: Path) -> str:
    return f'[projects.{json.dumps(str(project))}]\ntrust_level = "trusted"\n'


def print_trust(hooks_file: Path, out: TextIO | None = None) -> None:
    """After an install: say what trusts the hooks (see the module's summary)."""
    out = out or sys.stdout
    config = codex_home() / "config.toml"
    project = project_of(hooks_file)
    out.write(
        "Codex runs these hooks once you trust them: start `codex` in "
        f'{project} and choose "Trust all and continue" (or /hooks), or add '
        f"the lines below to {config}.\n"
    )
    codex = shutil.which("codex")
    entries: list[dict[str, Any]] | None = None
    untrusted_project = False
    if codex:
        try:
            entries, untrusted_project = _listed(codex, hooks_file)
        except (OSError, TimeoutError, subprocess.SubprocessError) as exc:
            out.write(f"(codex app-server did not list the hooks: {exc})\n")
    if entries is None:
        out.write(
            '[hooks.state."<hooks.json path>:<event, e.g. session_start>:0:0"]\n'
            'trusted_hash = "sha256:<what `codex app-server` hooks/list says>"\n'
        )
    elif entries:
        out.write("\n")
        if untrusted_project:
            out.write(
                f"# Codex reads {hooks_file} only in a project it trusts, and it does not "
                f"trust {project} yet:\n" + _project_toml(project) + "\n"
            )
        out.write(trust_toml(entries))
    else:
        out.write("(Codex already trusts every inbox hook in this file.)\n")


# Codex's name for each hook event in a trust key (snake_case).
_SNAKE = re.compile(r"(?<!^)(?=[A-Z])")
_HEADER = re.compile(r"""^\s*\[\s*hooks\.state\.("(?:[^"\\]|\\.)*"|'[^']*')\s*\]\s*(#.*)?$""")


def own_keys(hooks_file: Path) -> list[str]:
    """The trust keys of the inbox's hooks in ``hooks_file`` as it is now."""
    try:
        data = json.loads(hooks_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    target = str(hooks_file.resolve())
    keys = []
    hooks = data.get("hooks") if isinstance(data, dict) else None
    for event, groups in (hooks or {}).items() if isinstance(hooks, dict) else []:
        for gi, group in enumerate(groups if isinstance(groups, list) else []):
            inner = group.get("hooks") if isinstance(group, dict) else None
            for hi, h in enumerate(inner if isinstance(inner, list) else []):
                if isinstance(h, dict) and is_own_command(h.get("command"), "codex"):
                    keys.append(f"{target}:{_SNAKE.sub('_', str(event)).lower()}:{gi}:{hi}")
    return keys


def _header_key(line: str) -> str | None:
    found = _HEADER.match(line)
    if not found:
        return None
    quoted = found.group(1)
    if quoted.startswith("'"):
        return quoted[1:-1]
    try:
        return str(json.loads(quoted))
    except ValueError:
        return None


def drop_trust(keys: list[str], config: Path | None = None) -> int:
    """Take the ``[hooks.state."<key>"]`` tables of ``keys`` out of Codex's config.toml
    (the rest of the file as it is); the number taken out."""
    config = config or codex_home() / "config.toml"
    if not keys:
        return 0
    try:
        lines = config.read_text(encoding="utf-8").splitlines(keepends=True)
    except FileNotFoundError:
        return 0
    wanted, kept, dropped, skipping = set(keys), [], 0, False
    for line in lines:
        if line.lstrip().startswith("["):
            key = _header_key(line)
            skipping = key is not None and key in wanted
            dropped += skipping
        if not skipping:
            kept.append(line)
    if dropped:
        fd, tmp = tempfile.mkstemp(dir=config.parent, prefix=f".{config.name}.")
        os.chmod(tmp, config.stat().st_mode & 0o777)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write("".join(kept))
        os.replace(tmp, config)
    return dropped


__all__ = [
    "drop_trust",
    "hook_entries",
    "own_keys",
    "print_trust",
    "project_of",
    "trust_toml",
    "untrusted_own",
]
