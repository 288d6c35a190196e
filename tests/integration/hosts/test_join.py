"""Joining another machine's store: the line ``inbox up`` prints (TLS, or clear text only
behind its flag), ``--listen``'s refusals, and a joined home remembering its store."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from bus.core import locate
from bus.core.settings import Settings
from bus.ops.join import join_lines, remember
from tests.support.paths import REPO

CA = "ssl_ca_certs=/etc/inbox/ca.crt"
TLS = f"rediss://:pw@10.0.0.1:6380/0?{CA}&ssl_cert_reqs=required"


@pytest.mark.parametrize(
    ("url", "clear_text", "joins", "warns"),
    [
        (TLS, False, True, ""),
        ("unix:///h/redis/redis.sock", False, False, ""),  # this machine only
        ("redis://:pw@127.0.0.1:6380/0", False, False, ""),  # loopback
        ("rediss://:pw@localhost:6380/0?" + CA + "&ssl_cert_reqs=required", False, False, ""),
        ("rediss://:pw@10.0.0.1:6380/0?" + CA, False, False, "ssl_cert_reqs=required"),
        ("rediss://:pw@10.0.0.1:6380/0?ssl_cert_reqs=required", False, False, "ssl_ca_certs"),
        ("redis://:pw@10.0.0.1:6380/0", False, False, "--clear-text"),  # no line without it
        ("redis://:pw@10.0.0.1:6380/0", True, True, "clear text"),  # the line, and a warning
    ],
)
def test_join_lines(url: str, clear_text: bool, joins: bool, warns: str) -> None:
    lines, warning = join_lines(url, clear_text=clear_text)
    assert bool(lines) == joins
    if joins:
        assert lines[-1].strip() == f"INBOX_REDIS_URL={shlex.quote(url)} inbox up"
    assert (warns in warning) if warns else warning == ""


def test_a_joined_home_remembers_its_store_and_the_environment_wins(tmp_path: Path) -> None:
    url = "redis://:pw@10.0.0.1:6380/0"
    kept = remember(tmp_path, {"INBOX_REDIS_URL": url, "INBOX_HOST": "b", "INBOX_BROKER_URL": ""})
    assert kept is not None and kept.stat().st_mode & 0o777 == 0o600
    assert locate.joined(tmp_path) == {"INBOX_REDIS_URL": url, "INBOX_HOST": "b"}
    s = Settings.from_env({"INBOX_HOME": str(tmp_path)})
    assert (s.redis_url, s.host, s.store_url()) == (url, "b", url)
    other = "redis://127.0.0.1:1/0"
    s = Settings.from_env({"INBOX_HOME": str(tmp_path), "INBOX_REDIS_URL": other})
    assert s.redis_url == other and s.host != "b"  # the environment chooses: nothing read
    from bus.lanes.read import Place

    place = Place({"INBOX_HOME": str(tmp_path)})
    assert (place.store_url(), place.host) == (url, "b")  # the read lane finds it too


def test_a_link_where_the_store_file_goes_is_refused_and_nothing_written(
    tmp_path: Path,
) -> None:
    from bus.local.private_files import LinkRefused

    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    home.mkdir()
    elsewhere.write_text("someone else's\n")
    (home / locate.JOINED_FILE).symlink_to(elsewhere)
    with pytest.raises(LinkRefused, match="is a link"):
        remember(home, {"INBOX_REDIS_URL": "redis://:secret@10.0.0.1:6380/0"})
    assert elsewhere.read_text() == "someone else's\n"  # the password never went through it
    assert (home / locate.JOINED_FILE).is_symlink()
    assert sorted(p.name for p in home.iterdir()) == [locate.JOINED_FILE]  # no file left


def inbox(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bus", *args],
        env=env,
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("args", "extra", "says"),
    [
        (["--listen", "10.0.0.1", "--redis-port", "6380"], {}, "no TLS"),
        (["--listen", "10.0.0.1", "--clear-text"], {}, "--redis-port"),
        (
            ["--listen", "10.0.0.1", "--redis-port", "6380", "--clear-text"],
            {"INBOX_REDIS_URL": "redis://127.0.0.1:1/0"},
            "INBOX_REDIS_URL",
        ),
    ],
)
def test_listen_is_refused_without_what_it_needs(
    tmp_path: Path, args: list[str], extra: dict[str, str], says: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INBOX_")}
    env.update(INBOX_HOME=str(tmp_path / "home"), **extra)
    out = inbox(env, "up", *args)
    assert out.returncode == 2, out.stdout + out.stderr
    assert json.loads(out.stdout)["error"] == "bad_input" and says in out.stdout
    assert out.stderr.count("\n") == 1
    assert not (tmp_path / "home").exists()  # nothing made
