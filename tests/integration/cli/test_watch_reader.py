"""``inbox watch`` with a session's token reads as that session, live as durably: only
itself and its lanes, and of a session it only gave work to, its own messages."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import replace

from bus.api import Bus
from bus.core.settings import Settings
from bus.trust.tokens import SCOPE_READ, SCOPE_WRITE, issue
from tests.support.waiting import wait_for

SECRET = "w" * 32


def watch(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "bus.surfaces.cli.app", "watch", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_the_live_watch_applies_the_reader_rule(
    settings: Settings, make_bus: Callable[..., Bus]
) -> None:
    b = make_bus(secret=SECRET)
    for sid in ("alice", "worker1", "bob", "carol"):
        b.open_session(sid)
    b.store.sessions.add_gave("alice", "worker1")  # alice gave worker1 work: one of its lanes
    alice = issue(SECRET, session="alice", scopes=[SCOPE_READ, SCOPE_WRITE])
    bob = issue(SECRET, session="bob", scopes=[SCOPE_WRITE])
    env = {**replace(settings, secret=SECRET, token=alice).child_env(), "INBOX_DISPATCHER": "none"}

    # What is not alice's to follow is refused, nothing read.
    for args in (["carol"], ["--all"], ["--lanes", "bob"]):
        proc = watch(env, *args)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 1, (args, out, err)
        assert json.loads(out)["error"] == "not_your_lane" and err.count("\n") == 1

    proc = watch(env, "worker1")
    got: list[dict[str, object]] = []
    seen = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            got.append(json.loads(line))
            seen.set()

    threading.Thread(target=read, daemon=True).start()
    try:

        def sent_and_seen() -> bool:
            # The watcher starts at "$": send until it follows. Bob's first, each round.
            b.send({"to_id": "worker1", "text": "bob's private"}, token=bob)
            b.send({"to_id": "worker1", "text": "from alice"}, token=alice)
            return seen.wait(1.0)

        wait_for(sent_and_seen, timeout=30, what="the watcher's first line")
    finally:
        proc.kill()
        proc.wait(10)
    assert got
    assert all(e["message"]["from_session"] == "alice" for e in got), got  # type: ignore[index]
