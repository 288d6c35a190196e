"""``inbox up --redis-port N``, started as the README says: the embedded server listens on
TCP with a generated password, and the worker and the scheduler it starts reach it (their
store URL carries the password), so a send is delivered and its session woken. Its
children never get the token or session of the shell that started it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.support.cli import inbox
from tests.support.local_servers import free_port
from tests.support.waiting import wait_for

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.slow
def test_inbox_up_with_a_redis_port_delivers_and_wakes(tmp_path: Path) -> None:
    home, port = tmp_path / "h", free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("INBOX_")}
    env.update({"INBOX_HOME": str(home), "INBOX_HOST": "porthost", "PYTHONPATH": str(REPO)})
    # The shell that starts it acts as a session, with its token.
    shell = {**env, "INBOX_TOKEN": "the-shells-token", "INBOX_SESSION": "the-shells-session"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "bus.surfaces.cli.app", "up", "--redis-port", str(port)],
        env=shell,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    log: list[str] = []
    ready = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            log.append(line)
            if "Ctrl-C stops everything" in line:
                ready.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        assert ready.wait(60), "".join(log)
        password = (home / "redis" / "password").read_text().strip()
        assert password and password not in "".join(log)
        # TCP needs the generated password.
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=port).ping()
        assert redis.Redis(port=port, password=password).ping()
        assert inbox(env, "session", "open", "demo").returncode == 0
        sent = inbox(env, "send", "--to-id", "demo", "--from", "porthost:me", "--text", "hi")
        assert sent.returncode == 0, sent.stderr
        msg_id = json.loads(sent.stdout)["id"]

        def woken() -> Any:
            # The worker delivered it to the floor and the scheduler's wake put the
            # notice there: both reached the store through their URL.
            lines = json.loads(inbox(env, "peek", "demo").stdout)
            return [m for m in lines if msg_id in m.get("notice", {}).get("messages", [])]

        wait_for(woken, timeout=60, what="the worker's delivery and wake", interval=0.3)
        assert "Authentication required" not in (home / "logs" / "worker.log").read_text()
        rows = json.loads((home / "up.procs.json").read_text())
        children = [r for r in rows if r["role"] in ("worker", "scheduler", "commands")]
        assert {r["role"] for r in children} == {"worker", "scheduler", "commands"}, rows
        for row in children:
            environ = Path(f"/proc/{row['pid']}/environ").read_bytes().split(b"\0")
            names = {e.split(b"=", 1)[0] for e in environ}
            assert not names & {b"INBOX_TOKEN", b"INBOX_SESSION"}, row
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
        code = proc.wait(60)
    assert code == 0, "".join(log)
