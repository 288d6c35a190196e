"""A full disk in words: ``inbox up`` on a full disk refuses ``disk_full`` naming the
folder, what is free and what to free (not ``[Errno 28]``); ``inbox status`` names it in
its ``disk`` entry. A real full disk: a small tmpfs filled, in a mount namespace."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bus.core.disk_space import FULL_BYTES, MB, disk_entry, size_words
from bus.core.settings import Settings

REPO = Path(__file__).resolve().parents[3]


def in_full_disk(mount: Path, script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``script`` run where ``mount`` is a 128 KB tmpfs filled to the last byte."""
    fill = f"head -c 400000 /dev/zero > {mount}/fill 2>/dev/null; "
    return subprocess.run(
        [
            "unshare",
            "-rm",
            "sh",
            "-c",
            f"mount -t tmpfs -o size=128k tmpfs {mount} && {fill}{script}",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_inbox_up_and_status_on_a_full_disk(tmp_path: Path, settings: Settings) -> None:
    if shutil.which("unshare") is None:
        pytest.skip("no unshare: no disk can be filled here")
    mount = tmp_path / "disk"
    mount.mkdir()
    probe = in_full_disk(mount, "true", {})
    if probe.returncode != 0:
        pytest.skip(f"no mount namespace here: {probe.stderr.strip()}")
    py = sys.executable
    env = {**settings.child_env(), "PYTHONPATH": str(REPO)}
    env.pop("INBOX_REDIS_URL", None)  # inbox up starts its own store in the home
    home = mount / "h"
    up = in_full_disk(mount, f"INBOX_HOME={home} {py} -m bus.surfaces.cli.app up", env)
    assert up.returncode == 1, up.stdout + up.stderr
    answer = json.loads(up.stdout)
    assert answer["error"] == "disk_full" and "Errno" not in up.stdout + up.stderr
    assert str(mount) in answer["folder"] and "is full (0 B free)" in answer["message"]
    assert answer["fix"] == (
        "free at least 64 MB on it, or set INBOX_HOME to a folder on a disk with room"
    )
    assert up.stderr.count("\n") == 1 and "free at least 64 MB" in up.stderr

    # inbox status (the store elsewhere, the home on the full disk) names it.
    env = {**settings.child_env(), "PYTHONPATH": str(REPO)}
    status = in_full_disk(mount, f"INBOX_HOME={mount} {py} -m bus status", env)
    report = json.loads(status.stdout)
    assert report["ok"] is False, report
    assert report["disk"]["reason"] == "disk_full" and report["disk"]["folder"] == str(mount)
    assert report["disk"]["free_bytes"] == 0 and "free at least" in report["disk"]["fix"]


@pytest.mark.parametrize(
    ("free", "ok"),
    [(None, True), (FULL_BYTES, True), (FULL_BYTES - 1, False), (0, False), (10**12, True)],
)
def test_disk_entry(free: int | None, ok: bool) -> None:
    entry = disk_entry("/h", free)
    assert entry["ok"] is ok and entry["folder"] == "/h"
    assert ("fix" in entry) is (not ok)


@pytest.mark.parametrize(
    ("n", "words"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (2048, "2 KB"),
        (64 * MB, "64 MB"),
        (int(1.5 * 1024 * MB), "1.5 GB"),
    ],
)
def test_size_words(n: int, words: str) -> None:
    assert size_words(n) == words
