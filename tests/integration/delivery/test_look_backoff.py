"""The scheduler's looks at notices left on the floor (bus/delivery/heard.py): a look
writes nothing when nothing changed; a woken session's notice no harness took is looked
at less and less often (capped), every 10 s again once its harness is seen; a notice a
dead drainer took is still carried again."""

from __future__ import annotations

import json

import pytest

from bus.api import Bus
from bus.core.models import now_ms
from bus.delivery import heard
from bus.delivery.scheduler import sweep_backlogs

S = 1000
WAKE = {"ids": ["a"], "new": [], "wake": ["a", 1], "at": 0}
PLAIN = {"ids": ["a"], "new": [], "wake": [], "at": 0}


@pytest.mark.parametrize(
    ("record", "now", "last_seen", "look"),
    [
        (PLAIN, 9 * S, None, False),  # too soon
        (PLAIN, 10 * S, None, True),  # every 10 s while its harness is about
        (PLAIN, 16 * S, None, False),  # looked at in the sweep before
        (PLAIN, 20 * S, None, True),
        (PLAIN, 3_600 * S, None, True),
        # A wake no harness took (not seen since the notice): 10, 20, 40, 80, 160, 320 s,
        # then every 300 s.
        (WAKE, 10 * S, None, True),
        (WAKE, 20 * S, None, True),
        (WAKE, 30 * S, None, False),
        (WAKE, 40 * S, None, True),
        (WAKE, 60 * S, None, False),
        (WAKE, 160 * S, None, True),
        (WAKE, 320 * S, None, True),
        (WAKE, 330 * S, None, False),
        (WAKE, 620 * S, None, True),
        (WAKE, 3_600 * S, None, False),
        (WAKE, 3_620 * S, None, True),  # 320 + 11 * 300
        # Its harness seen since the notice (a turn, a drain): every 10 s again.
        (WAKE, 30 * S, 5 * S, True),
        (WAKE, 3_600 * S, 1, True),
        ({**WAKE, "gone": 1}, 30 * S, None, True),  # seen gone: each sweep until given back
    ],
)
def test_needs_look(record: dict, now: int, last_seen: int | None, look: bool) -> None:  # type: ignore[type-arg]
    assert heard.needs_look(json.dumps(record), now, last_seen) is look


def test_an_hour_unheard_is_a_few_looks_not_360() -> None:
    looks = sum(heard.needs_look(json.dumps(WAKE), t * S, None) for t in range(0, 3_600, 5))
    assert looks == 5 + 1 + 10  # 10..160 s, 320 s, then every 300 s to the hour
    assert sum(heard.needs_look(json.dumps(PLAIN), t * S, None) for t in range(0, 3_600, 5)) == 359


def test_a_look_at_a_notice_still_on_the_floor_writes_nothing(bus: Bus) -> None:
    bus.open_session("w")
    bus.turn("w", "start")
    bus.send({"from": "hosta:peer", "to_id": "w", "text": "x"})
    bus.deliver_session("w")
    key = bus.store.k.s("w", "floor")
    [nid] = bus.store.r.hkeys(key)
    before = bus.store.r.hget(key, nid)
    assert bus.inbox.sweep_floor("w", now=now_ms() + 60_000) == 0  # the look: still there
    assert bus.store.r.hget(key, nid) == before  # nothing written: the AOF does not grow

    # A drainer that took it and died: the next looks mark it gone, then give it back.
    bus.floor.session_dir("w").joinpath("messages.jsonl").unlink()
    assert bus.inbox.sweep_floor("w") == 0 and "gone" in bus.store.r.hget(key, nid)
    assert bus.inbox.sweep_floor("w", now=now_ms() + heard.GONE_GRACE_MS) == 1
    assert bus.store.r.hlen(key) == 0
    bus.deliver_session("w")
    again = [x for x in bus.floor.peek("w") if x.get("kind") == "notice"]
    assert len(again) == 1  # carried again by a new notice


def test_the_scheduler_backs_off_a_wake_no_harness_took(bus: Bus) -> None:
    bus.open_session("idle", host="hostb")  # another host's: its looks are deliveries
    key = bus.store.k.s("idle", "floor")
    # A notice that asked for a wake, written 30 s ago; its harness not seen since.
    rec = {**WAKE, "at": now_ms() - 30_000}
    bus.store.r.hset(key, "n1", json.dumps(rec))
    bus.store.sessions.update_session("idle", last_seen=1)
    assert sweep_backlogs(bus.delivery) == 0  # looks at 10, 20, then 40 s: none now
    bus.store.r.hset(key, "n1", json.dumps({**rec, "wake": []}))
    assert sweep_backlogs(bus.delivery) == 1  # a notice that asked no wake: every 10 s
    bus.store.r.hset(key, "n1", json.dumps(rec))
    bus.store.r.delete(bus.store.k.s("idle", "pending"))  # that delivery done
    assert sweep_backlogs(bus.delivery) == 0
    bus.store.sessions.update_session("idle", last_seen=now_ms())  # a turn, a drain: seen again
    assert sweep_backlogs(bus.delivery) == 1
