"""Attacks on the host the bus runs on (docs/security.md): pictures swapped for links or
bombs, private files, the embedded Redis's password, wake commands and the secrets they
get, the children ``inbox flower`` starts. Each attack is refused and nothing is written.

Real Redis, real files, real child processes.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import struct
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import pytest
import redis

from bus.api import Bus
from bus.core.errors import BadInput
from bus.core.models import now_ms
from bus.core.notices import ThreadSummary, notice_line
from bus.local.private_files import private_dirs
from bus.ops.embedded import EmbeddedRedis, password_path
from tests.support.pictures import png, png_chunk
from tests.support.trust import WS
from tests.support.waiting import wait_for


@pytest.fixture
def agent(bus: Bus) -> Bus:
    bus.items.member_add(WS, "dean")
    bus.open_session("agent", workspace=WS, starter="dean")
    bus.item_post("agent", "k", title="look")
    return bus


ROUNDS = 1000


def mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_stopping_inbox_flower_stops_its_child(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "import bus.ops.flower as f\n"
        "from pathlib import Path\nfrom bus.core.settings import Settings\n"
        "f.flower_argv = lambda *a: [sys.executable, '-c', "
        "'import os, time; print(os.getpid(), flush=True); time.sleep(120)']\n"
        f"sys.exit(f.run_flower(Settings(home=Path({str(tmp_path)!r}), broker_url='redis://127.0.0.1:1/0'), basic_auth='u:p'))\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=dict(os.environ)
    )
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        parent.send_signal(signal.SIGTERM)
        parent.wait(30)
        deadline = time.monotonic() + 10
        while Path(f"/proc/{child}").exists():
            state = Path(f"/proc/{child}/stat").read_text().split()[2]
            if state == "Z":
                break
            assert time.monotonic() < deadline, "flower's child outlived inbox flower"
            time.sleep(0.05)
    finally:
        if parent.poll() is None:
            parent.kill()


def test_the_worker_runs_only_the_wake_command_kept_on_its_host(bus: Bus, tmp_path: Path) -> None:
    mine, planted = tmp_path / "mine", tmp_path / "planted"
    bus.open_session("sleeper", wake_cmd=f"touch {mine}")
    # A process that can write to Redis plants its own command in the record.
    bus.store.r.hset(bus.store.k.s("sleeper", "session"), "wake_cmd", f"touch {planted}")
    bus.inbox.notices.run_wake_cmd("sleeper", {"text": "[inbox · 1 new]"})
    wait_for(lambda: mine.exists() or planted.exists(), 30, "a wake command")
    assert mine.exists() and not planted.exists()
    assert (bus.floor.session_dir("sleeper") / "wake_cmd").stat().st_mode & 0o777 == 0o600
    # A session opened for another host has no command kept here: nothing runs (a quick
    # command started is over when run_wake_cmd returns: bus.delivery.wake_cmd.start).
    bus.open_session("far", host="elsewhere", wake_cmd=f"touch {planted}")
    bus.inbox.notices.run_wake_cmd("far", {"text": "[inbox · 1 new]"})
    assert not planted.exists()


def test_a_wake_command_gets_no_secrets(
    bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INBOX_SECRET", "do-not-leak")
    monkeypatch.setenv("INBOX_TOKEN", "do-not-leak-either")
    out = tmp_path / "env.json"
    script = tmp_path / "dump.py"
    script.write_text(
        "import json, os, sys\n"
        f"json.dump({{'env': dict(os.environ), 'stdin': sys.stdin.read()}}, open({str(out)!r}, 'w'))\n"
    )
    # A plain command line: run without a shell.
    bus.open_session("sleeper", wake_cmd=f"{sys.executable} {script}")
    summary = ThreadSummary(thread="thr_aaaa", label="deploy", count=1, senders=["h:a"])
    line = notice_line("n1", "sleeper", [summary], ["m1"], now_ms())
    bus.inbox.notices.run_wake_cmd("sleeper", line)
    # Started and left to run (bus.delivery.wake_cmd): its output comes when it is done.
    wait_for(lambda: out.exists() and out.read_text().endswith("}"), 30, what="the dump")
    got = json.loads(out.read_text())
    assert got["stdin"] == line["text"]  # the notice, as the woken turn's prompt
    assert "INBOX_SECRET" not in got["env"] and "INBOX_TOKEN" not in got["env"]
    # The opener's PATH (kept with the command), each folder once.
    folders = [f for f in os.environ["PATH"].split(":") if f]
    assert got["env"].get("PATH") == ":".join(dict.fromkeys(folders))


def test_pictures_swapped_for_links_are_never_read_outside_the_root(
    agent: Bus, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    inside, outside = png((0, 255, 0)), png((255, 0, 0))
    (root / "sub" / "p.png").write_bytes(inside)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "p.png").write_bytes(outside)
    real_sub, link_tmp = root / "sub.real", root / "sub.link"
    stop = threading.Event()

    def flip() -> None:
        # Swap root/sub between a real directory and a link to elsewhere, atomically.
        os.rename(root / "sub", real_sub)
        while not stop.is_set():
            os.symlink(elsewhere, link_tmp)
            os.replace(link_tmp, root / "sub")  # sub -> elsewhere
            os.unlink(root / "sub")
            os.rename(real_sub, root / "sub")  # sub is the real directory
            os.rename(root / "sub", real_sub)
        if not (root / "sub").exists():
            os.rename(real_sub, root / "sub")

    flipper = threading.Thread(target=flip, daemon=True)
    # Switch threads as often as possible, so the swap lands inside the check's window.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    flipper.start()
    ok = refused = 0
    try:
        for _ in range(ROUNDS):
            try:
                agent.reply_inbox("agent", "k", image_paths=["sub/p.png"], root=root)
                ok += 1
            except BadInput:
                refused += 1
    finally:
        sys.setswitchinterval(interval)
        stop.set()
        flipper.join(10)
    kept = sorted((Path(agent.settings.home) / "items" / "agent" / "k" / "files").glob("*"))
    assert all(p.read_bytes() == inside for p in kept)  # zero reads outside the root
    assert ok + refused == ROUNDS


def test_a_script_under_a_png_header_and_a_bomb_are_refused(agent: Bus, tmp_path: Path) -> None:
    (tmp_path / "script.png").write_bytes(b"\x89PNG\r\n\x1a\n#!/bin/sh\nrm -rf ~\n")
    ihdr = struct.pack(">IIBBBBB", 100_000, 100_000, 8, 2, 0, 0, 0)
    bomb = (
        b"\x89PNG\r\n\x1a\n"
        + png_chunk(b"IHDR", ihdr)
        + png_chunk(b"IDAT", zlib.compress(b"\0" * 64))
        + png_chunk(b"IEND", b"")
    )
    (tmp_path / "bomb.png").write_bytes(bomb)
    for name, code in (("script.png", "not_a_picture"), ("bomb.png", "picture_too_large")):
        with pytest.raises(BadInput) as err:
            agent.reply_inbox("agent", "k", text="see", image_paths=[name], root=tmp_path)
        assert err.value.code == code
    assert not (Path(agent.settings.home) / "items").exists()
    assert agent.items.read_inbox("agent")["items"][0]["thread"] == []


def test_files_are_private(agent: Bus, tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        (tmp_path / "p.png").write_bytes(png())
        agent.reply_inbox("agent", "k", image_paths=["p.png"], root=tmp_path)
        home = Path(agent.settings.home)
        for d in (home / "items", home / "items" / "agent", home / "items" / "agent" / "k"):
            assert mode(d) == 0o700, d
        [f] = (home / "items" / "agent" / "k" / "files").iterdir()
        assert mode(f) == 0o600
        fresh = private_dirs(tmp_path / "new-home" / "a")
        assert mode(fresh) == mode(fresh.parent) == 0o700
    finally:
        os.umask(old)


def test_the_embedded_redis_on_tcp_needs_its_password(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    home = tmp_path / "h"
    sock = home / "redis" / "redis.sock"
    with EmbeddedRedis(sock, home / "redis", port=port, persist=False) as server:
        pw = password_path(sock)
        assert mode(pw) == 0o600 and mode(home) == 0o700
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=port).ping()
        c = redis.Redis(port=port, password=server.password)
        assert c.ping()
        with pytest.raises(redis.exceptions.NoPermissionError):
            c.config_get("dir")
        c.close()
        from bus.core.settings import Settings

        assert redis.Redis.from_url(Settings(home=home).store_url()).ping()
