"""The inbox on a real Redis store: threads, one notice, wakes, marks, withdraw, replies.

The library's delivery is driven directly here (``deliver_session``, ``tick``) so each
step is deterministic; tests/integration/inbox/test_inbox_live.py runs the same paths through real Celery
workers and a real scheduler.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from bus.api import Bus
from bus.core.clock import SYSTEM, ManualClock
from bus.core.errors import Refused
from bus.delivery.scheduler import tick
from bus.store.inbox import AGE_MARK
from bus.surfaces.harness.listener import Listener
from tests.support.waiting import wait_for


def floor(b: Bus, sid: str) -> list[dict[str, Any]]:
    return b.floor.peek(sid)


def notices_on_floor(b: Bus, sid: str) -> list[dict[str, Any]]:
    return [x for x in floor(b, sid) if x.get("kind") == "notice"]


def events(b: Bus, sid: str, kind: str) -> list[dict[str, str]]:
    rows = b.store.r.xrange(b.store.k.s(sid, "events"))
    return [f for _eid, f in rows if f.get("kind") == kind]


def marks(b: Bus, sid: str) -> dict[str, str]:
    raw = b.store.r.hgetall(b.store.k.s(sid, "msgs"))
    return {k: json.loads(v)["mark"] for k, v in raw.items()}


def send(b: Bus, to: str, text: str, **kw: Any) -> dict[str, Any]:
    fields = {"from": kw.pop("sender", "hosta:peer"), "to_id": to, "text": text, **kw}
    return b.send(fields)


def run_due(b: Bus, sid: str) -> None:
    """What the scheduler and the worker do when a due time has come."""
    tick(b.delivery, sweep=False, clock=b.clock)
    b.deliver_session(sid)


@pytest.fixture
def clock() -> ManualClock:
    """Moved by the test: it starts at the wall clock, because the stream entry's id (the
    Redis clock) stamps each message's arrival."""
    return ManualClock(SYSTEM.now_ms())


@pytest.fixture
def clocked(make_bus: Callable[..., Bus], clock: ManualClock) -> Bus:
    """A bus whose inbox and scheduler decide by ``clock``: a test moves time past the
    debounce instead of sleeping it."""
    return make_bus(clock=clock)


def past_debounce(b: Bus, clock: ManualClock) -> None:
    # A second of slack: the arrival is stamped by Redis, a little after the clock's start.
    clock.advance(int(b.settings.wake_debounce_s * 1000) + 1000)


@pytest.fixture
def running(bus: Bus) -> str:
    bus.open_session("coord")
    bus.turn("coord", "start")
    return "coord"


@pytest.fixture
def idle(bus: Bus) -> str:
    """An idle session that has had its first turn (so plain actions do not wake it)."""
    bus.open_session("lane", parent="coord")
    bus.turn("lane", "start")
    bus.turn("lane", "end")
    bus.deliver_session("lane")
    return "lane"


def test_300_messages_to_a_running_session_arrive_as_one_notice(bus: Bus, running: str) -> None:
    senders = [f"ha:lane{i}" for i in range(7)]
    for n in range(300):
        sender = senders[n % 7]
        kw = {"class": "blocker"} if sender == "ha:lane3" and n > 290 else {}
        send(bus, running, f"msg {n}", sender=sender, **kw)
        if n % 60 == 59:  # deliveries happen while the burst goes on
            bus.deliver_session(running)
    bus.deliver_session(running)
    text = bus.drain(running, stamped=True)
    assert isinstance(text, str)
    assert text.count("[inbox") == 1, text
    lines = text.splitlines()
    assert lines[0].startswith("[inbox · 300 new in 7 threads")
    assert len(lines) == 8
    assert lines[1].startswith("  ! ") and "ha:lane3" in lines[1]
    assert all(ln.startswith("  · ") for ln in lines[2:])
    assert bus.session(running).turns == 1 and events(bus, running, "wake") == []
    assert set(marks(bus, running).values()) == {"noticed"}


def test_notice_marks_noticed_only_when_drained(bus: Bus, running: str) -> None:
    sent = send(bus, running, "hello")
    bus.deliver_session(running)
    assert marks(bus, running) == {sent["id"]: "new"}
    bus.drain(running)
    assert marks(bus, running) == {sent["id"]: "noticed"}


def test_socket_ack_marks_noticed(bus: Bus, running: str) -> None:
    got: list[dict[str, Any]] = []
    with Listener.for_session(bus.floor, running, lambda o: got.append(o) or True):
        sent = send(bus, running, "over the socket")
        bus.deliver_session(running)
    assert [g["kind"] for g in got] == ["notice"]
    assert got[0]["notice"]["messages"] == [sent["id"]]
    assert marks(bus, running) == {sent["id"]: "noticed"}
    assert floor(bus, running) == []


@pytest.mark.parametrize(
    ("case", "kw", "wakes"),
    [
        ("blocker", {"class": "blocker"}, True),
        ("action from parent", {"sender": "hosta:coord", "from_session": "coord"}, True),
        ("action from a stranger", {}, False),
        (
            "fyi from parent",
            {"class": "fyi", "sender": "hosta:coord", "from_session": "coord"},
            False,
        ),
        ("report from a stranger", {"class": "report"}, False),
    ],
)
def test_an_idle_session_wakes_only_for_what_deserves_it(
    clocked: Bus, clock: ManualClock, case: str, kw: dict[str, Any], wakes: bool
) -> None:
    bus, idle = clocked, "lane"
    bus.open_session(idle, parent="coord")
    bus.turn(idle, "start")
    bus.turn(idle, "end")
    bus.open_session("coord")
    send(bus, idle, case, **kw)
    bus.deliver_session(idle)
    run_due(bus, idle)
    assert notices_on_floor(bus, idle) == []  # never before the debounce
    past_debounce(bus, clock)  # the debounce's due time passes, no sleep
    run_due(bus, idle)
    assert bool(notices_on_floor(bus, idle)) is wakes, case
    assert len(events(bus, idle, "wake")) == (1 if wakes else 0)


def test_first_work_wakes_and_records_the_delegator(clocked: Bus, clock: ManualClock) -> None:
    bus = clocked
    bus.open_session("boss")
    bus.open_session("fresh")
    send(bus, "fresh", "please do X", sender="hosta:boss", from_session="boss")
    bus.deliver_session("fresh")
    past_debounce(bus, clock)
    run_due(bus, "fresh")
    assert len(notices_on_floor(bus, "fresh")) == 1
    assert bus.session("fresh").delegator == "boss"
    # fresh gave no work to boss, but boss gave work to fresh: fresh's report wakes boss.
    bus.turn("boss", "start")
    bus.turn("boss", "end")
    send(bus, "boss", "done", sender="hosta:fresh", from_session="fresh", **{"class": "report"})
    bus.deliver_session("boss")
    past_debounce(bus, clock)
    run_due(bus, "boss")
    assert len(events(bus, "boss", "wake")) == 1


def test_a_burst_wakes_an_idle_session_once_after_the_debounce(bus: Bus, idle: str) -> None:
    send(bus, idle, "first", **{"class": "blocker"})
    bus.deliver_session(idle)
    due = bus.store.schedule.next_due()
    assert due is not None
    for i in range(20):
        send(bus, idle, f"more {i}", **{"class": "blocker"})
        bus.deliver_session(idle)
    time.sleep(bus.settings.wake_debounce_s)
    for _ in range(3):  # however often the scheduler and worker run
        run_due(bus, idle)
    assert len(events(bus, idle, "wake")) == 1
    # On a slow machine the wake may come before the burst ends; the rest then joins a
    # steer notice of the turn the wake started, never a second wake.
    carried = [m for n in notices_on_floor(bus, idle) for m in n["notice"]["messages"]]
    assert len(carried) == 21
    wake_at = int(events(bus, idle, "wake")[0]["at"])
    sent_at = int(events(bus, idle, "inbox")[0]["at"])
    assert wake_at - sent_at >= bus.settings.wake_debounce_s * 1000


def test_fyi_only_inbox_is_delivered_at_the_flush_and_never_earlier(bus: Bus, idle: str) -> None:
    send(bus, idle, "just so you know", **{"class": "fyi"})
    bus.deliver_session(idle)
    due = bus.store.schedule.next_due()
    assert due is not None
    sent_at = int(events(bus, idle, "inbox")[0]["at"])
    assert due - sent_at == int(bus.settings.fyi_flush_s * 1000)
    time.sleep(bus.settings.wake_debounce_s * 2)
    run_due(bus, idle)
    assert notices_on_floor(bus, idle) == []
    time.sleep(max(0.0, (due - time.time() * 1000) / 1000) + 0.05)
    run_due(bus, idle)
    assert len(notices_on_floor(bus, idle)) == 1
    assert [e["reason"] for e in events(bus, idle, "wake")] == ["flush"]


def test_a_waiting_prompt_never_waits_behind_agent_messages(bus: Bus, running: str) -> None:
    bus.turn(running, "start", prompt_waiting=True)
    send(bus, running, "urgent thing", **{"class": "blocker"})
    bus.deliver_session(running)
    assert notices_on_floor(bus, running) == []  # no steer ahead of the person's prompt
    bus.turn(running, "end")
    bus.turn(running, "start")  # the person's prompt's own turn
    bus.deliver_session(running)
    assert len(notices_on_floor(bus, running)) == 1
    assert events(bus, running, "wake") == []


def test_withdraw_unsends_before_a_notice_and_the_resend_answers_withdrawn(
    bus: Bus, idle: str
) -> None:
    bus.open_session("me")
    sent = send(bus, idle, "oops", sender="hosta:me", from_session="me", **{"class": "fyi"})
    bus.deliver_session(idle)
    with pytest.raises(Refused):
        bus.withdraw(sent["id"], by="someone-else")
    assert bus.withdraw(sent["id"], by="me")["state"] == "unsent"
    again = send(bus, idle, "oops", sender="hosta:me", from_session="me", id=sent["id"])
    assert again["state"] == "withdrawn"
    assert marks(bus, idle) == {sent["id"]: "removed"}
    bus.turn(idle, "start")
    bus.deliver_session(idle)
    assert notices_on_floor(bus, idle) == []


def test_withdraw_after_a_notice_retracts_into_the_thread_without_a_wake(
    bus: Bus, idle: str
) -> None:
    bus.open_session("me")
    bus.turn(idle, "start")
    sent = send(bus, idle, "wrong diff", sender="hosta:me", from_session="me")
    bus.deliver_session(idle)
    bus.drain(idle)
    bus.turn(idle, "end")
    out = bus.withdraw(sent["id"], by="me")
    assert out == {"ok": True, "id": sent["id"], "state": "retracted", "via": "inbox"}
    bus.deliver_session(idle)
    thread = bus.read(idle, sent["thread"])
    assert [m["kind"] for m in thread["messages"]] == ["message", "retraction"]
    time.sleep(bus.settings.wake_debounce_s)
    run_due(bus, idle)
    assert events(bus, idle, "wake") == []
    resend = send(bus, idle, "wrong diff", sender="hosta:me", from_session="me", id=sent["id"])
    assert resend["state"] == "retracted"


@pytest.mark.parametrize(("outcome", "state"), [("socket", "retracted"), ("revert", "unsent")])
def test_withdraw_waits_for_a_notice_on_its_way(
    bus: Bus, running: str, outcome: str, state: str
) -> None:
    bus.open_session("me")
    bus.turn(running, "start", prompt_waiting=True)  # so the delivery builds no notice
    sent = send(bus, running, "racing", sender="hosta:me", from_session="me")
    bus.deliver_session(running)
    k = bus.store.k
    # A notice is on its way (built, not yet written) when the withdraw arrives.
    ids = bus.store.script("notice_take")(
        keys=[k.s(running, n) for n in ("notice", "new", "wakeq", "events")],
        args=["ntc-held", 1],
    )
    assert ids == [sent["id"]]
    result: dict[str, Any] = {}
    t = threading.Thread(target=lambda: result.update(bus.withdraw(sent["id"], by="me")))
    t.start()
    t.join(0.3)
    assert t.is_alive() and not result  # it is waiting for the notice, bounded by 10 s
    if outcome == "socket":
        bus.inbox.mark_noticed(running, ["ntc-held"], "socket")  # a listener acked it
    else:
        bus.store.script("notice_revert")(
            keys=[k.s(running, n) for n in ("notice", "new", "wakeq", "events")],
            args=["ntc-held", 2, "test"],
        )
    t.join(10)
    assert result["state"] == state


def test_a_waited_send_gets_the_answer_of_the_turn_that_carried_it(bus: Bus, running: str) -> None:
    result: dict[str, Any] = {}
    t = threading.Thread(
        target=lambda: result.update(
            bus.send(
                {"from": "hosta:peer", "to_id": running, "text": "q?", "id": "wq-1"},
                wait=True,
                timeout=20,
            )
        )
    )
    t.start()
    with Listener.for_session(bus.floor, running, lambda o: True):
        deadline = time.monotonic() + 10
        while not marks(bus, running) and time.monotonic() < deadline:
            bus.deliver_session(running)
        bus.deliver_session(running)
    bus.turn(running, "end", answer="42")
    t.join(20)
    assert result["state"] == "answered" and result["answer"] == "42"
    again = bus.send({"from": "hosta:peer", "to_id": running, "text": "q?", "id": "wq-1"})
    assert again["answer"] == "42" and again["duplicate"] is True
    bus.turn(running, "start")
    bus.deliver_session(running)
    assert notices_on_floor(bus, running) == []  # not carried again


def test_closing_answers_waiting_senders_with_an_error_and_keeps_threads(
    bus: Bus, idle: str
) -> None:
    result: dict[str, Any] = {}
    t = threading.Thread(
        target=lambda: result.update(
            bus.send(
                {"from": "hosta:peer", "to_id": idle, "text": "are you there"},
                wait=True,
                timeout=20,
            )
        )
    )
    t.start()
    # Waiting, and its message stored (the sender registers as a waiter first).
    k = bus.store.k
    wait_for(
        lambda: bus.store.r.scard(k.s(idle, "waiters")) and bus.store.r.hlen(k.s(idle, "ids")),
        10,
        "the sender waiting on its stored message",
    )
    bus.deliver_session(idle)
    bus.close_session(idle)
    t.join(20)
    assert result["ok"] is False and result["error"] == "session_closed"
    bus.deliver_session(idle)
    [thread] = bus.threads(idle)["threads"]
    assert bus.read(idle, thread["threadId"])["messages"][0]["text"] == "are you there"
    # closed: later messages are delivered raw, as before the inbox
    late = send(bus, idle, "after close")
    bus.deliver_session(idle)
    assert late["id"] in [x["id"] for x in floor(bus, idle)]


def test_threads_read_whole_marked_read_refused_to_others_and_replies_never_wake(
    bus: Bus, idle: str
) -> None:
    bus.open_session("asker")
    bus.turn("asker", "start")
    bus.turn("asker", "end")
    sent = [
        send(bus, idle, f"part {i}", sender="hosta:asker", from_session="asker", pr=7)
        for i in range(3)
    ]
    bus.deliver_session(idle)
    [row] = bus.threads(idle)["threads"]
    assert row["count"] == 3 and row["unread"] == 3 and row["label"] == "PR #7"
    whole = bus.read(idle, row["threadId"], mark_read=True)
    assert [m["text"] for m in whole["messages"]] == ["part 0", "part 1", "part 2"]
    assert bus.threads(idle)["threads"][0]["unread"] == 0
    bus.open_session("outsider")
    with pytest.raises(Refused) as err:
        bus.read("outsider", row["threadId"])
    assert err.value.code == "not_a_party"
    reply = bus.reply(idle, row["threadId"], "on it")
    assert reply["to"] == ["asker"]
    bus.deliver_session("asker")
    [asker_row] = bus.threads("asker")["threads"]
    assert asker_row["threadId"] == sent[0]["thread"] and asker_row["newestPreview"] == "on it"
    time.sleep(bus.settings.wake_debounce_s)
    run_due(bus, "asker")
    assert events(bus, "asker", "wake") == []


@pytest.mark.parametrize("where", ["global", "session"])
def test_with_the_inbox_switched_off_every_message_is_a_raw_line(
    make_bus: Callable[..., Bus], where: str
) -> None:
    b = make_bus(agent_inbox=where != "global")
    b.open_session("old", agent_inbox=False if where == "session" else None)
    ids = [send(b, "old", f"m{i}")["id"] for i in range(3)]
    b.deliver_session("old")
    assert [x["id"] for x in floor(b, "old")] == ids
    assert all(x["kind"] == "message" for x in floor(b, "old"))


def test_two_schedulers_never_take_the_same_wake(bus: Bus, idle: str) -> None:
    send(bus, idle, "block", **{"class": "blocker"})
    bus.deliver_session(idle)
    time.sleep(bus.settings.wake_debounce_s)
    results: list[list[tuple[str, str]]] = []
    barrier = threading.Barrier(4)

    def take() -> None:
        barrier.wait()
        results.append(bus.store.schedule.take_due(int(time.time() * 1000)))

    threads = [threading.Thread(target=take) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(len(r) for r in results) == [0, 0, 0, 1]


def test_retention_lets_go_only_of_answered_and_read(make_bus: Callable[..., Bus]) -> None:
    b = make_bus(retain_messages=5)
    b.open_session("r")
    b.turn("r", "start")
    for i in range(8):
        send(b, "r", f"old {i}")
    b.deliver_session("r")
    b.drain("r")
    b.turn("r", "end", answer="ok")
    for i in range(4):
        send(b, "r", f"new {i}", **{"class": "fyi"})
    b.deliver_session("r")
    b.inbox.prune("r")
    kept = marks(b, "r")
    assert list(kept.values()).count("new") == 4
    assert len(kept) == 5


def test_settings_are_used_for_timings(make_bus: Callable[..., Bus]) -> None:
    b = make_bus(wake_debounce_s=5.0)
    b.open_session("t")
    send(b, "t", "first work")
    b.deliver_session("t")
    due = b.store.schedule.next_due()
    assert due is not None and due - time.time() * 1000 > 4000


def test_send_answers_outlive_the_messages_but_not_forever(make_bus: Callable[..., Bus]) -> None:
    b = make_bus(retain_messages=0)
    b.open_session("r")
    b.turn("r", "start")
    send(b, "r", "answered long ago", id="old-1")
    send(b, "r", "answered today", id="new-1")
    b.deliver_session("r")
    b.drain("r")
    b.turn("r", "end", answer="done")
    # Sent long ago: its age (append.lua: minus its first-seen ms, in ``threads``) and its
    # receipt's last transition too (a receipt that moved lately keeps its answer).
    k = b.store.k
    b.store.r.zadd(k.s("r", "threads"), {f"{AGE_MARK}old-1": -1})
    rc = json.loads(b.store.r.hget(k.s("r", "ids"), "~old-1"))
    b.store.r.hset(
        k.s("r", "ids"),
        "~old-1",
        json.dumps({f: 1 if isinstance(v, int) else v for f, v in rc.items()}),
    )
    b.inbox.prune("r")
    assert marks(b, "r") == {}  # the inbox let go of both answered messages
    assert send(b, "r", "answered today", id="new-1")["answer"] == "done"
    assert send(b, "r", "answered long ago", id="old-1")["duplicate"] is False


def test_a_refused_notice_stays_new_and_is_tried_again_at_the_next_turn_boundary(
    bus: Bus, running: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = send(bus, running, "hello")
    real_deliver = bus.floor.write_line

    def full_disk(sid: str, obj: dict[str, Any], **kw: Any) -> Any:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(bus.floor, "write_line", full_disk)
    bus.deliver_session(running)
    assert marks(bus, running) == {sent["id"]: "new"}
    retry_at = bus.store.r.zscore(bus.store.k.due, f"retry|{running}")
    assert retry_at is not None and retry_at - time.time() * 1000 > 0
    monkeypatch.setattr(bus.floor, "write_line", real_deliver)
    bus.deliver_session(running)
    assert notices_on_floor(bus, running) == []  # waits for the retry time...
    bus.turn(running, "end")
    bus.turn(running, "start")  # ...or the next turn boundary, whichever comes first
    bus.deliver_session(running)
    [notice] = notices_on_floor(bus, running)
    assert notice["notice"]["messages"] == [sent["id"]]


def test_an_idle_session_that_is_not_listening_is_woken_by_its_wake_cmd(
    bus: Bus, tmp_path: Any
) -> None:
    out = tmp_path / "woken.txt"
    bus.open_session("sleeper", wake_cmd=f"cat > {out}")
    bus.turn("sleeper", "start")
    bus.turn("sleeper", "end")
    send(bus, "sleeper", "the build broke", **{"class": "blocker"})
    bus.deliver_session("sleeper")
    assert not out.exists()  # not before the debounce
    time.sleep(bus.settings.wake_debounce_s)
    run_due(bus, "sleeper")
    text = out.read_text()
    assert text.startswith("[inbox · 1 new in 1 thread") and "the build broke" in text


def test_a_drain_with_redis_down_marks_its_notices_once_redis_answers(
    bus: Bus, running: str, make_bus: Callable[..., Bus]
) -> None:
    sent = send(bus, running, "hello")
    bus.deliver_session(running)
    offline = make_bus(redis_url="redis://127.0.0.1:1/0")  # same home, no Redis
    lines = offline.drain(running)
    assert [x["kind"] for x in lines] == ["notice"]  # the drain itself works
    assert marks(bus, running) == {sent["id"]: "new"}
    bus.deliver_session(running)  # the next delivery (or drain) catches the marks up
    assert marks(bus, running) == {sent["id"]: "noticed"}


def test_a_notice_carrying_an_urgent_message_is_urgent(bus: Bus, running: str) -> None:
    send(bus, running, "calm")
    bus.deliver_session(running)
    send(bus, running, "now!", urgency="urgent")
    bus.deliver_session(running)
    assert [n.get("urgency") for n in notices_on_floor(bus, running)] == [None, "urgent"]


def test_the_debounce_counts_from_arrival_not_the_senders_clock(bus: Bus, idle: str) -> None:
    an_hour_ago = int(time.time() * 1000) - 3_600_000
    send(bus, idle, "my clock is wrong", ts=an_hour_ago, **{"class": "blocker"})
    bus.deliver_session(idle)
    assert notices_on_floor(bus, idle) == []  # not woken at once
    due = bus.store.schedule.next_due()
    assert due is not None and due > time.time() * 1000


def test_a_notice_its_turn_ended_before_draining_wakes_the_idle_session_once(
    clocked: Bus, clock: ManualClock, tmp_path: Any
) -> None:
    # The chaos soak's race: a notice for a running turn is written to the floor just
    # after the harness's last drain; the turn then ends. The blocker in it must not wait
    # unheard on the floor of an idle session: it wakes the session, after the debounce.
    bus, sid = clocked, "racer"
    out = tmp_path / "woken.txt"
    bus.open_session(sid, wake_cmd=f"cat > {out}")
    bus.turn(sid, "start")
    send(bus, sid, "the build broke", **{"class": "blocker"})
    bus.deliver_session(sid)  # running: a steer notice on the floor, no wake
    assert len(notices_on_floor(bus, sid)) == 1 and not events(bus, sid, "wake")
    bus.turn(sid, "end")  # ... and the turn ends without a drain
    bus.deliver_session(sid)
    assert not events(bus, sid, "wake") and not out.exists()  # not before the debounce
    past_debounce(bus, clock)
    run_due(bus, sid)
    [wake] = events(bus, sid, "wake")
    assert wake["reason"] == "debounced"
    assert bus.store.sessions.get_session(sid).state == "running"
    assert "the build broke" in out.read_text()  # the floor's notice, on the command's stdin
    # A harness that still does not drain is not woken again for the same notice.
    bus.turn(sid, "end")
    past_debounce(bus, clock)
    run_due(bus, sid)
    assert len(events(bus, sid, "wake")) == 1
    # Its drain then hears the message once.
    [line] = [x for x in bus.drain(sid) if x.get("kind") == "notice"]
    assert "the build broke" in line["text"]


def test_an_fyi_left_on_an_idle_sessions_floor_waits_for_the_flush(
    clocked: Bus, clock: ManualClock
) -> None:
    bus, sid = clocked, "racer2"
    bus.open_session(sid)
    bus.turn(sid, "start")
    send(bus, sid, "for your information", **{"class": "fyi"})
    bus.deliver_session(sid)
    bus.turn(sid, "end")
    past_debounce(bus, clock)
    run_due(bus, sid)
    assert not events(bus, sid, "wake")  # an fyi never wakes before the flush
    clock.advance(int(bus.settings.fyi_flush_s * 1000) + 1000)
    run_due(bus, sid)
    assert [w["reason"] for w in events(bus, sid, "wake")] == ["flush"]


def test_a_message_a_session_sends_itself_is_noticed_like_any_other(bus: Bus, running: str) -> None:
    """A note to self (``from_session`` is its recipient) is new, noticed once, read."""
    note = "remember the migration"
    sent = send(bus, running, note, sender="hosta:coord", from_session=running)
    bus.deliver_session(running)
    assert marks(bus, running) == {sent["id"]: "new"}
    text = bus.drain(running, stamped=True)
    assert isinstance(text, str) and note in text
    assert marks(bus, running) == {sent["id"]: "noticed"}
    assert bus.receipt(sent["id"], by=running)["state"] == "noticed"
    [row] = bus.threads(running)["threads"]
    assert row["unread"] == 1 and row["new"] == 0
    whole = bus.read(running, row["threadId"], mark_read=True)
    assert [m["read"] for m in whole["messages"]] == [True]
    assert marks(bus, running) == {sent["id"]: "read"}
    bus.deliver_session(running)
    assert notices_on_floor(bus, running) == []  # carried once
