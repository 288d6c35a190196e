"""``inbox up --redis-port N``, started as the README says: the embedded server listens on
TCP with a generated password, and the worker and the scheduler it starts reach it (their
store URL carries the password), so a send is delivered and its session woken. Its
children never get the token or session of the shell that started it."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.support.cli import inbox
from tests.support.local_servers import free_port
from tests.support.up import Up, up_env
from tests.support.waiting import wait_for


@pytest.mark.slow
def test_inbox_up_with_a_redis_port_delivers_and_wakes(tmp_path: Path) -> None:
    home, port = tmp_path / "h", free_port()
    env = up_env(home, "porthost")
    # The shell that starts it acts as a session, with its token.
    shell = {**env, "INBOX_TOKEN": "the-shells-token", "INBOX_SESSION": "the-shells-session"}
    up = Up(shell, "--redis-port", str(port))
    proc, log = up.proc, up.lines
    try:
        assert up.ready.wait(60), up.text
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
