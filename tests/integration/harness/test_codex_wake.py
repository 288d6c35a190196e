"""The wake command a Codex session's hooks give it (bus.surfaces.harness.codex_wake)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bus.surfaces.harness import codex_wake


@pytest.mark.parametrize(
    ("argv", "sub", "interactive"),
    [
        (["codex"], None, True),
        (["codex", "--dangerously-bypass-approvals-and-sandbox"], None, True),
        (["codex", "fix the tests"], "fix the tests", True),
        (["codex", "resume", "--last"], "resume", True),
        (["codex", "-c", "model=o3", "fork"], "fork", True),
        (["codex", "exec", "--json", "hi"], "exec", False),
        (["codex", "e", "hi"], "e", False),
        (["codex", "-c", "exec=1", "--model", "m", "exec", "hi"], "exec", False),
        (["codex", "--profile", "exec", "review"], "review", False),
        (["codex", "app-server"], "app-server", False),
        (["codex", "--", "exec"], None, True),
    ],
)
def test_the_subcommand_says_whether_a_queued_message_runs(
    argv: list[str], sub: str | None, interactive: bool
) -> None:
    assert codex_wake.subcommand(argv) == sub
    assert codex_wake.is_interactive(argv) is interactive


@pytest.mark.parametrize(
    ("cmd", "closes"),
    [
        (None, True),
        ("", True),
        (codex_wake.queue_cmd("/opt/codex", "019a-b", "/home/u/.codex"), True),
        ("cd /p && codex exec resume 019a-b -", False),
        ("my-own-waker", False),
    ],
)
def test_session_end_keeps_open_only_a_session_a_person_gave_a_wake_command(
    cmd: str | None, closes: bool
) -> None:
    assert codex_wake.closes_at_end(cmd) is closes


def test_the_queue_command_hands_stdin_over_as_the_message(tmp_path: Path) -> None:
    fake = tmp_path / "codex"
    out = tmp_path / "argv"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$CODEX_HOME" "$@" > {out}\n')
    fake.chmod(0o755)
    cmd = codex_wake.queue_cmd(str(fake), "019a-b", str(tmp_path / "my home"))
    notice = "[inbox · 1 new in 1 thread · read: inbox read s t]\n  ! t · lead · it's $HOME `x`"
    subprocess.run(["sh", "-c", cmd], input=notice, text=True, check=True, timeout=30)
    lines = out.read_text().split("\n")
    assert lines[:5] == [str(tmp_path / "my home"), "queue", "--thread", "019a-b", "--message"]
    assert "\n".join(lines[5:]).rstrip("\n") == notice


def test_the_codex_process_is_found_among_the_hooks_ancestors(tmp_path: Path) -> None:
    if not Path("/proc/self/exe").exists():
        pytest.skip("no /proc here")
    # A shell under the name codex (as Codex runs a hook) runs sh, which runs the hook.
    codex = tmp_path / "codex"
    shutil.copy("/bin/sh", codex)
    probe = tmp_path / "probe.py"
    probe.write_text(
        f"import json, sys\nsys.path.insert(0, {str(Path(__file__).resolve().parents[3])!r})\n"
        "from bus.surfaces.harness import codex_wake\nprint(json.dumps(codex_wake.codex_process()))\n"
    )
    hook = tmp_path / "hook.sh"
    hook.write_text(f"{sys.executable} {probe}\ntrue\n")
    done = subprocess.run(
        [str(codex), "-c", f"sh {hook}; true", "exec", "--json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    exe, argv = json.loads(done.stdout)
    assert exe == str(codex)
    assert argv[:2] == [str(codex), "-c"] and argv[-2:] == ["exec", "--json"]
    # Not a codex among the ancestors: none found.
    assert codex_wake.codex_process() is None


def test_codexs_background_server_is_told_from_other_app_servers() -> None:
    daemon = ["codex", "app-server", "--listen", "unix://", "--managed-daemon"]
    assert codex_wake.is_daemon(daemon)
    assert not codex_wake.is_daemon(["codex", "app-server"])  # an editor's own, on stdio
    assert not codex_wake.is_daemon(["codex", "app-server", "daemon", "pid-update-loop"])
    assert not codex_wake.is_daemon(["codex", "--no-daemon"])


def test_a_window_started_elsewhere_with_cd_counts_for_its_folder(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    here = str(tmp_path)
    assert str(project) in codex_wake._folders(here, ["codex", "-C", "project"])
    assert str(project) in codex_wake._folders(here, ["codex", f"--cd={project}"])
    assert codex_wake._folders(str(project), ["codex"]) == {str(project)}


def test_only_windows_count_as_a_sessions_holders(tmp_path: Path) -> None:
    # This process is no codex window: none found for its folder.
    assert codex_wake.windows(str(tmp_path), str(tmp_path)) == []
    assert {"queue", "mcp", "login", "exec", "app-server"} <= codex_wake._NO_WINDOW
    assert None not in codex_wake._NO_WINDOW and "resume" not in codex_wake._NO_WINDOW
