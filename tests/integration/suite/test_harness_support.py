"""The real-CLI tests' own rules: skipped where the CLIs are not installed (one line at the
end of the run says how to install them), failed where they must be (CI)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.harness_support import CLI_PACKAGES, SKIP_HEAD, clis_required
from tests.support.paths import REPO


@pytest.mark.parametrize(
    ("env", "required"),
    [
        ({}, False),
        ({"CI": "true"}, True),
        ({"CI": "1"}, True),
        ({"CI": "false"}, False),
        ({"INBOX_TEST_REQUIRE_CLIS": "1"}, True),
        ({"INBOX_TEST_REQUIRE_CLIS": "0", "CI": "true"}, False),  # the explicit one wins
        ({"INBOX_TEST_REQUIRE_CLIS": "", "CI": "true"}, True),
    ],
)
def test_when_a_missing_cli_fails_rather_than_skips(env: dict[str, str], required: bool) -> None:
    assert clis_required(env) is required


def test_ci_installs_the_packages_the_skip_line_names_and_requires_them() -> None:
    script = (REPO / ".ci" / "run").read_text()
    for package in CLI_PACKAGES:
        assert package in script
    assert "export INBOX_TEST_REQUIRE_CLIS=1" in script


def _run_real_cli_tests(
    redis_url: str, tmp_path: Path, **env: str
) -> subprocess.CompletedProcess[str]:
    empty = tmp_path / "no-clis"
    empty.mkdir()
    base = {k: v for k, v in os.environ.items() if k not in ("CI", "INBOX_TEST_REQUIRE_CLIS")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "0", "-p", "no:cacheprovider",
         "tests/integration/harness/test_codex_cli.py", "tests/integration/harness/test_claude_cli.py"],
        cwd=REPO,
        env={**base, "INBOX_TEST_CLI_DIR": str(empty), "INBOX_TEST_REDIS_URL": redis_url,
             "PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip


@pytest.mark.slow
def test_without_the_clis_their_tests_skip_with_one_line_saying_how_to_install_them(
    redis_url: str, tmp_path: Path
) -> None:
    done = _run_real_cli_tests(redis_url, tmp_path)
    assert done.returncode == 0, done.stdout[-3000:]
    last = [line for line in done.stdout.splitlines() if line.startswith(f"{SKIP_HEAD}: ")]
    assert len(last) == 1, done.stdout[-3000:]
    assert "claude, codex not installed" in last[0]
    assert f"npm install --prefix {tmp_path / 'no-clis'} {' '.join(CLI_PACKAGES)}" in last[0]
    assert " passed" not in done.stdout.splitlines()[-1]
    assert "skipped" in done.stdout.splitlines()[-1]


@pytest.mark.slow
def test_where_the_clis_are_required_a_missing_one_fails(redis_url: str, tmp_path: Path) -> None:
    done = _run_real_cli_tests(redis_url, tmp_path, INBOX_TEST_REQUIRE_CLIS="1")
    assert done.returncode == 1, done.stdout[-3000:]
    assert "REAL-CLI TEST FAILED: codex is not installed" in done.stdout
    assert "skipped" not in done.stdout.splitlines()[-1]
