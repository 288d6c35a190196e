"""Heard once: a notice carried again under a new id (a worker killed after a listener's
ack, a store that lost its last writes) does not tell the model the same message twice;
one that repeats part of itself says which (bus/delivery/said.py)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from bus.api import Bus
from bus.core.models import now_ms
from bus.core.settings import Settings
from bus.delivery import heard
from bus.delivery.floor import Floor
from bus.delivery.said import SAID, SAID_KEEP, fresh_ids, read_said, record_said, unsaid
from bus.surfaces.harness.listener import Listener

SID = "once-1"
MARK = "of these repeated from an earlier notice"


def notice(nid: str, ids: list[str]) -> dict[str, Any]:
    thread = {"thread": "t1", "label": "t1", "count": len(ids), "senders": ["h:peer"]}
    thread |= {"newest_at": 1, "newest_preview": "hi", "blocker": False}
    return {
        "v": 1,
        "id": nid,
        "ts": 1,
        "from": "h:inbox",
        "to_id": SID,
        "kind": "notice",
        "text": f"[inbox · {len(ids)} new in 1 thread · read: inbox read {SID} <thread>]",
        "notice": {"threads": [thread], "messages": ids},
    }


@pytest.mark.parametrize(
    ("ids", "said", "repeats"),
    [
        (["a", "b"], set(), None),  # nothing said: unchanged
        (["a", "b"], {"a", "b"}, "dropped"),
        (["a", "b", "c"], {"a", "c", "z"}, ["a", "c"]),
        ([], {"a"}, None),  # a notice naming nothing is handed on as it is
    ],
)
def test_unsaid_drops_a_whole_repeat_and_marks_a_partial_one(
    ids: list[str], said: set[str], repeats: Any
) -> None:
    line = notice("n1", ids)
    out = unsaid(line, said)
    if repeats == "dropped":
        assert out is None
    elif repeats is None:
        assert out is line
    else:
        assert out is not None and out["repeats"] == repeats
        assert out["text"].endswith(f"↻ {len(repeats)} messages {MARK}")
        assert fresh_ids(out) == [i for i in ids if i not in said]
        assert "repeats" not in line  # a copy


def test_a_raw_line_is_not_the_said_records_business() -> None:
    raw = {"id": "m1", "from": "h:x", "text": "hi"}
    assert unsaid(raw, {"m1"}) is raw


def test_a_drain_hands_on_no_message_twice_and_marks_a_partial_repeat(tmp_path: Path) -> None:
    fl = Floor(tmp_path)
    fl.append(SID, notice("n1", ["a", "b"]))
    first = fl.drain(SID)
    assert [x["id"] for x in first.lines] == ["n1"]
    fl.handed_on(SID, first.lines)
    # Carried again under new ids: wholly, then partly with a new message.
    fl.append(SID, notice("n2", ["a", "b"]))
    fl.append(SID, notice("n3", ["b", "c"]))
    again = fl.drain(SID)
    assert [x["id"] for x in again.repeated] == ["n2"]  # confirmed, not handed on
    assert [x["id"] for x in again.taken] == ["n3", "n2"]
    [partial] = again.lines
    assert partial["repeats"] == ["b"] and fresh_ids(partial) == ["c"]
    fl.handed_on(SID, again.lines)
    assert read_said(fl.session_dir(SID)) == {"a", "b", "c"}


def test_the_stamped_drain_marks_what_it_repeats(bus: Bus, settings: Settings) -> None:
    bus.open_session(SID)
    bus.floor.append(SID, notice("n1", ["a"]))
    bus.drain(SID)
    bus.floor.append(SID, notice("n2", ["a", "b"]))
    out = subprocess.run(
        [sys.executable, "-m", "bus", "drain", SID, "--stamped"],
        env={**settings.child_env(), "INBOX_DISPATCHER": "none"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == f"  ↻ 1 message {MARK}"


def test_the_record_is_bounded(tmp_path: Path) -> None:
    for n in range(12):
        ids = [str(uuid.uuid4()) for _ in range(400)]
        record_said(tmp_path, [notice(f"n{n}", ids)], keep=1000)
    said = (tmp_path / SAID).read_text().splitlines()
    assert 1000 <= len(said) <= 2 * 1000 + 400  # cut back past its bound
    assert said[-400:] == ids
    assert SAID_KEEP >= 1000


def test_a_notice_carried_again_after_a_worker_kill_is_heard_once(
    bus: Bus, settings: Settings
) -> None:
    """The worker is SIGKILLed after the listener acked the notice and before it recorded
    it: the next delivery gives its messages back and carries them again, under a new
    notice id. The listener hands the repeat on only for the message it had not had."""
    bus.open_session(SID)
    bus.turn(SID, "start")
    got: list[dict[str, Any]] = []
    with Listener.for_session(bus.floor, SID, lambda o: got.append(o) is None):
        ids = [
            bus.send({"from": "hosta:peer", "to_id": SID, "text": f"m{i}"})["id"] for i in (0, 1)
        ]
        code = (
            "from bus.api import connect\n"
            "from bus.delivery.dispatch import NullDispatcher\n"
            f"connect(dispatcher=NullDispatcher()).deliver_session({SID!r})\n"
        )
        env = dict(settings.child_env(), INBOX_FAULT="notice:after_ack", INBOX_DISPATCHER="none")
        child = subprocess.run([sys.executable, "-c", code], env=env, timeout=60, check=False)
        assert child.returncode == -signal.SIGKILL
        assert [sorted(fresh_ids(x)) for x in got] == [sorted(ids)]
        third = bus.send({"from": "hosta:peer", "to_id": SID, "text": "m2"})["id"]
        # The dead worker's lock lapses (its TTL); the next delivery recovers the notice
        # in flight, and its messages go again.
        deadline = time.monotonic() + 4 * settings.lock_ttl_s
        while bus.deliver_session(SID).busy:
            assert time.monotonic() < deadline, "the dead worker's lock never lapsed"
            time.sleep(0.1)
        heard = (bus.floor.session_dir(SID) / "heard.jsonl").read_text().splitlines()
    notices = {json.loads(x)["id"] for x in heard}
    assert len(notices) == 2  # the messages really were carried again, in a second notice
    # A notice lists its messages thread by thread, not always in the order they were sent.
    assert [sorted(fresh_ids(x)) for x in got] == [sorted(ids), [third]]
    assert sorted(got[1]["repeats"]) == sorted(ids) and got[1]["text"].endswith(
        f"↻ 2 messages {MARK}"
    )
    # The bus itself says the recovered notice's messages may have been heard.
    assert sorted(got[1]["redelivered"]) == sorted(ids)
    assert "↻ 2 messages of these carried again after a crash (maybe seen)" in got[1]["text"]


def test_a_notice_given_back_after_a_drainer_died_lists_its_messages_as_redelivered(
    bus: Bus, settings: Settings
) -> None:
    """A drainer SIGKILLed after it took the floor and before it recorded the marks: the
    messages come back and the next notice lists them as redelivered. The model, which
    never got them (the drainer died), is handed them: they are not in said.jsonl."""
    bus.open_session(SID)
    bus.turn(SID, "start")
    ids = [bus.send({"from": "hosta:peer", "to_id": SID, "text": f"m{i}"})["id"] for i in (0, 1)]
    bus.deliver_session(SID)
    env = dict(settings.child_env(), INBOX_FAULT="drain:after_unlink", INBOX_DISPATCHER="none")
    child = subprocess.run([sys.executable, "-m", "bus", "drain", SID], env=env, timeout=60)
    assert child.returncode == -signal.SIGKILL
    bus.deliver_session(SID)  # marks the notice's record gone from the floor
    bus.inbox.sweep_floor(SID, now=now_ms() + heard.GONE_GRACE_MS)  # past the grace: back
    bus.deliver_session(SID)
    [line] = bus.drain(SID)
    assert sorted(line["notice"]["messages"]) == sorted(ids)
    assert sorted(line["redelivered"]) == sorted(ids)
    assert "repeats" not in line
    assert "carried again after a crash (maybe seen)" in line["text"]
    # A later, ordinary notice carries no such mark.
    bus.send({"from": "hosta:peer", "to_id": SID, "text": "m2"})
    bus.deliver_session(SID)
    [later] = bus.drain(SID)
    assert "redelivered" not in later
