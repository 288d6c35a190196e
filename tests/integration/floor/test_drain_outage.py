"""A drain while Redis is down: the floor is taken all the same, the marks wait in a 0600
file, the words say Redis did not answer (not a missing file), and a ``last_seen`` that
was not recorded is tried again at the next tool step."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bus.api import Bus
from bus.core.lane_names import PENDING_MARKS
from bus.core.settings import Settings
from bus.delivery.drain_marks import outage_words
from bus.lanes import entry
from bus.lanes.drain import touch_seen


def floor_with_a_notice(b: Bus) -> None:
    b.open_session("alice")
    b.open_session("bob")
    b.turn("bob", "start")
    b.send({"from": "hosta:alice", "from_session": "alice", "to_id": "bob", "text": "look"})
    b.deliver_session("bob")
    assert b.peek("bob")


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    yield
    os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_fast_drain_with_redis_down_says_so_and_keeps_its_marks_private(
    settings: Settings, bus: Bus, tmp_path: Path
) -> None:
    floor_with_a_notice(bus)
    env = {
        **settings.child_env(),
        "INBOX_REDIS_URL": f"unix://{tmp_path / 'nothing-here.sock'}",
        "INBOX_REDIS_CLUSTER": "",  # a standalone server's socket, with nobody there
    }
    out = subprocess.run(
        [sys.executable, "-c", "import os; os.umask(0o022); from bus.lanes.entry import main; main()",
         "drain", "bob"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0 and '"kind": "notice"' in out.stdout  # drained all the same
    assert "Errno" not in out.stderr and "No such file" not in out.stderr
    assert out.stderr == (
        "inbox: drain of bob done; Redis did not answer (no server socket there), so 1 "
        f"notice mark(s) wait in {PENDING_MARKS} for the next drain or delivery\n"
    )
    pending = bus.floor.session_dir("bob") / PENDING_MARKS
    assert mode(pending) == 0o600


def test_the_librarys_drain_with_redis_down_keeps_its_marks_private(
    make_bus: Callable[..., Bus], capsys: pytest.CaptureFixture[str], umask_022: None
) -> None:
    b = make_bus()
    floor_with_a_notice(b)
    down = make_bus(redis_url="redis://127.0.0.1:1/0")  # same floor, no Redis
    assert down.drain("bob")
    err = capsys.readouterr().err
    assert "Redis did not answer at 127.0.0.1:1 (connection refused)" in err
    assert "Error 111" not in err
    assert mode(b.floor.session_dir("bob") / PENDING_MARKS) == 0o600


@pytest.mark.parametrize(
    ("exc", "words"),
    [
        (FileNotFoundError(2, "No such file or directory"), "Redis did not answer (no server socket there)"),
        (ConnectionRefusedError(111, "Connection refused"), "Redis did not answer (connection refused)"),
        (TimeoutError("timed out"), "Redis did not answer (no answer in time)"),
    ],
)  # fmt: skip
def test_outage_words(exc: BaseException, words: str) -> None:
    assert outage_words(exc) == words


def test_a_last_seen_not_recorded_is_tried_again_at_the_next_step(
    settings: Settings,
    bus: Bus,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bus.open_session("bob")
    for name, value in settings.child_env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("INBOX_REDIS_URL", f"unix://{tmp_path / 'nothing-here.sock'}")
    monkeypatch.setenv("INBOX_REDIS_CLUSTER", "")  # a standalone server's, nobody there
    touch_seen("bob")
    assert "Redis did not answer (no server socket there)" in capsys.readouterr().err
    assert not (settings.home / "seen" / "bob").exists()
    assert entry.seen_due("bob")  # the next empty tool step tells Redis again

    for name, value in settings.child_env().items():
        monkeypatch.setenv(name, value)
    touch_seen("bob")  # Redis back: recorded, and marked
    assert bus.store.sessions.last_seen("bob") is not None
    assert not entry.seen_due("bob")


def test_on_a_cluster_a_hooks_drain_and_last_seen_are_recorded_whichever_node_is_named(
    cluster_settings: Settings,
    make_bus: Callable[..., Bus],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The URL names one node; the session's keys sit on whichever node owns their slot.
    # The small client would be answered MOVED there: the marks would never be recorded
    # and every tool step would print so. The library's cluster client writes them.
    b = make_bus(redis_url=cluster_settings.redis_url, redis_cluster=True)
    for name, value in b.settings.child_env().items():
        monkeypatch.setenv(name, value)
    sids = [f"cx{n}" for n in range(6)]  # several slots: on more than one node
    b.open_session("alice")
    for sid in sids:
        b.open_session(sid)
        b.turn(sid, "start")
        sent = b.send({"from": "hosta:alice", "from_session": "alice", "to_id": sid, "text": "x"})
        b.deliver_session(sid)
        out = subprocess.run(
            [sys.executable, "-m", "bus.lanes.entry", "drain", sid],
            env={**os.environ}, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert out.returncode == 0 and '"kind": "notice"' in out.stdout, out.stderr
        assert out.stderr == ""
        assert b.receipt(sent["id"], by="alice")["state"] == "noticed"
        touch_seen(sid)
        assert capsys.readouterr().err == ""
        assert b.store.sessions.last_seen(sid) is not None
