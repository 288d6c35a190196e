"""A damaged append-only file: ``inbox up`` names ``inbox repair-aof``, which repairs it
with the tools the embedded binary carries (a copy kept, the cut said); a write cut short
is said at start (bus.ops.aof_repair, bus.ops.aof_words)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import redis

from bus.core.settings import Settings
from bus.ops.embedded import EmbeddedRedis
from bus.ops.supervise import HomeLock
from tests.support.paths import REPO

ENTRIES = 100


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INBOX_")}
    env.update({"INBOX_HOME": str(home), "INBOX_HOST": "aofhost", "PYTHONPATH": str(REPO)})
    return env


def _inbox(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bus.surfaces.cli.app", *args],
        env=_env(home),
        capture_output=True,
        text=True,
        timeout=120,
    )


def _server(home: Path) -> EmbeddedRedis:
    s = Settings(home=home, host="aofhost")
    return EmbeddedRedis(s.embedded_socket, s.embedded_data)


def _filled(home: Path) -> Path:
    """A home whose embedded server wrote ENTRIES stream entries; its incremental AOF."""
    with _server(home) as server:
        c = redis.Redis(unix_socket_path=str(server.socket_path))
        for i in range(ENTRIES):
            c.xadd("st", {"n": str(i)})
        c.close()
    folder = Settings(home=home, host="aofhost").embedded_data / "appendonlydir"
    (incr,) = folder.glob("*.incr.aof")
    return incr


def _length(home: Path) -> int:
    with _server(home) as server:
        c = redis.Redis(unix_socket_path=str(server.socket_path))
        try:
            return int(c.xlen("st"))
        finally:
            c.close()


def test_a_damaged_aof_stops_up_naming_repair_aof_which_repairs_it_keeping_a_copy(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    incr = _filled(home)
    data = incr.read_bytes()
    incr.write_bytes(data[:300] + b"garbage!!" + data[309:])
    damaged = incr.read_bytes()

    up = _inbox(home, "up", "--concurrency", "1")
    said = up.stdout + up.stderr
    assert up.returncode == 1
    assert json.loads(up.stdout.splitlines()[-1])["error"] == "aof_damaged"
    (line,) = up.stderr.splitlines()  # one line, no traceback
    assert "append-only file is damaged" in line and "run `inbox repair-aof`" in line, said
    assert "./valkey-check-aof" not in said  # not a tool the install put on PATH

    out = _inbox(home, "repair-aof")
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout)
    assert answer["repaired"] is True and answer["file"] == incr.name
    assert 0 < answer["cut_at"] <= 300
    assert answer["dropped_bytes"] == len(damaged) - answer["cut_at"]
    assert incr.stat().st_size == answer["cut_at"]
    kept = Path(answer["backup"]) / incr.name
    assert kept.read_bytes() == damaged  # the AOF as it was

    assert 0 < _length(home) < ENTRIES  # the server loads what was before the damage
    again = json.loads(_inbox(home, "repair-aof").stdout)
    assert again["repaired"] is False


def test_a_write_cut_short_is_loaded_and_said_with_the_bytes_dropped(tmp_path: Path) -> None:
    home = tmp_path / "home"
    incr = _filled(home)
    incr.write_bytes(incr.read_bytes()[:-7])  # the last write, cut mid-command
    cut_size = incr.stat().st_size
    server = _server(home).start()
    try:
        kept = incr.stat().st_size  # the server truncated the partial command away
        assert kept < cut_size
        assert server.notes == [
            f"the append-only file {incr.name} ended in a write cut short (the server "
            f"stopped mid-write): {cut_size - kept} bytes after byte {kept} were dropped, "
            "the writes before kept"
        ]
        c = redis.Redis(unix_socket_path=str(server.socket_path))
        assert c.xlen("st") == ENTRIES - 1
        c.close()
    finally:
        server.stop()


def test_repair_is_refused_while_up_holds_the_home_and_changes_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    incr = _filled(home)
    incr.write_bytes(incr.read_bytes()[:-7])
    before = incr.read_bytes()
    lock = HomeLock(home).acquire()
    try:
        out = _inbox(home, "repair-aof")
    finally:
        lock.release()
    assert out.returncode == 1
    assert json.loads(out.stdout)["error"] == "server_running"
    assert "stop it" in out.stderr
    assert incr.read_bytes() == before


def test_a_damaged_base_is_refused_in_words_and_changes_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    incr = _filled(home)
    (base,) = incr.parent.glob("*.base.rdb")
    base.write_bytes(base.read_bytes()[:-3])
    before = sorted(p.name for p in incr.parent.parent.iterdir())
    out = _inbox(home, "repair-aof")
    assert out.returncode == 1
    answer = json.loads(out.stdout)
    assert answer["error"] == "aof_not_repaired" and "base snapshot" in answer["message"]
    assert sorted(p.name for p in incr.parent.parent.iterdir()) == before  # no copy made


def test_no_aof_is_said(tmp_path: Path) -> None:
    out = _inbox(tmp_path / "home", "repair-aof")
    assert out.returncode == 1 and "no append-only file" in json.loads(out.stdout)["message"]
