"""Blocking reads block for as long as asked, past redis-py's 5 s socket timeout.

Each test idles longer than that default on purpose: the wait itself is the behaviour.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from bus.api import Bus
from bus.core.errors import Refused
from bus.core.settings import Settings
from bus.delivery.dispatch import RecordingDispatcher
from bus.surfaces.harness.listener import Listener
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow
WAITED = ("--text", "how long?", "--wait", "--timeout", "30")
IDLE_S = 8.0  # longer than redis-py's default 5 s socket timeout


def marks(b: Bus, sid: str) -> dict[str, str]:
    raw = b.store.r.hgetall(b.store.k.s(sid, "msgs"))
    return {k: json.loads(v)["mark"] for k, v in raw.items()}


def test_a_waited_send_gets_the_answer_of_a_turn_that_ends_8_s_later(
    bus: Bus, settings: Settings
) -> None:
    bus.open_session("slow")
    bus.turn("slow", "start")
    env = dict(settings.child_env(), INBOX_DISPATCHER="none")
    sender = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bus.surfaces.cli.app",
            "send",
            "--to-id",
            "slow",
            "--from",
            "h:me",
            *WAITED,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: bus.store.r.scard(bus.store.k.s("slow", "waiters")), what="the waiter")
        with Listener.for_session(bus.floor, "slow", lambda o: True):
            wait_for(
                lambda: bus.deliver_session("slow") and "noticed" in marks(bus, "slow").values(),
                what="the notice acked",
            )
        time.sleep(IDLE_S)  # the turn runs on; the sender blocks all along
        bus.turn("slow", "end", answer="eight seconds")
        out, err = sender.communicate(timeout=30)
    finally:
        if sender.poll() is None:
            sender.kill()
    assert sender.returncode == 0, err
    answer = json.loads(out)
    assert answer["state"] == "answered" and answer["answer"] == "eight seconds"


def test_withdraw_waits_its_full_window_for_a_notice_on_its_way(bus: Bus) -> None:
    bus.open_session("me")
    bus.open_session("busy")
    bus.turn("busy", "start", prompt_waiting=True)  # so the delivery builds no notice
    sent = bus.send({"from": "hosta:me", "to_id": "busy", "text": "x", "from_session": "me"})
    bus.deliver_session("busy")
    k = bus.store.k
    # A notice is built and never written: the withdraw waits its whole window for it.
    bus.store.script("notice_take")(
        keys=[k.s("busy", n) for n in ("notice", "new", "wakeq", "events")],
        args=["ntc-held", 1],
    )
    with pytest.raises(Refused) as err:
        bus.withdraw(sent["id"], by="me")
    assert err.value.code == "timeout"  # its own bound, not the socket's


def test_watch_blocks_idle_past_the_socket_timeout_then_prints(settings: Settings) -> None:
    env = dict(settings.child_env(), INBOX_DISPATCHER="none")

    def inbox(*args: str) -> Any:
        return subprocess.run(
            [sys.executable, "-m", "bus.surfaces.cli.app", *args],
            env=env,
            capture_output=True,
            timeout=60,
        )

    inbox("session", "open", "w1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "bus.surfaces.cli.app", "watch", "w1"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    got: list[dict[str, Any]] = []
    seen = threading.Semaphore(0)

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            got.append(json.loads(line))
            seen.release()

    threading.Thread(target=read, daemon=True).start()
    try:

        def following() -> bool:
            inbox("send", "--to-id", "w1", "--from", "h:me", "--text", "first")
            return seen.acquire(timeout=1.0)

        wait_for(following, timeout=30, what="the watcher's first line")
        time.sleep(IDLE_S)  # nothing arrives for longer than a socket timeout
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        inbox("send", "--to-id", "w1", "--from", "h:me", "--text", "after the lull")
        assert seen.acquire(timeout=15), "nothing printed after the idle spell"
        assert got[-1]["message"]["text"] == "after the lull"
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_receipt_waited_on_a_cluster_blocks_past_the_socket_timeout(
    cluster_settings: Settings,
) -> None:
    # The cluster client's sockets time out after 5 s: the wait has a client of its own.
    b = Bus(cluster_settings, dispatcher=RecordingDispatcher())
    try:
        b.open_session("me")
        b.open_session("coord")
        b.turn("coord", "start")
        sent = b.send({"from": "ha:me", "from_session": "me", "to_id": "coord", "text": "hi"})
        key = b.store.k.s("coord", "events")
        node = b.store.r.get_node_from_key(key)
        got: list[dict[str, Any]] = []
        waiter = threading.Thread(
            target=lambda: got.append(
                b.receipt(sent["id"], by="me", wait_for="noticed", timeout=30)
            )
        )
        waiter.start()
        try:
            wait_for(
                lambda: any(
                    c.get("name") == f"inbox-wait:{sent['id']}" and c.get("cmd") == "xread"
                    for c in b.store.r.client_list(target_nodes=node)
                ),
                what="the waiter blocked on the events' node",
            )
            time.sleep(IDLE_S)  # the waiter blocks all along
            assert waiter.is_alive()
            b.deliver_session("coord")
            b.drain("coord")
        finally:
            waiter.join(30)
        assert not waiter.is_alive()
        assert got[0]["state"] == "noticed", got
    finally:
        b.store.r.close()
