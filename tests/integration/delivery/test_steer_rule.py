"""The steer rule is written once: :func:`bus.core.policy.steers`, and the snapshot's Lua
``steer_ready`` (``parts/snapshot.lua``) held equal to it over every row of one table, run
on a real server; the Python plan (:func:`bus.core.policy.decide`, with nothing an earlier
run left to settle first: :func:`bus.delivery.engine.left_over`) sends a steer exactly on
the same rows.
"""

from __future__ import annotations

import itertools
import json

import redis

from bus.core import policy
from bus.core.models import SessionInfo
from bus.delivery.engine import left_over
from bus.store.lua_files import lua_source

NOW = 1_000_000

# One row per combination: (state, the session's agent_inbox field, the bus's default,
# prompt waiting, wake pending, a notice in flight, one unconfirmed on the floor, retry_at).
ROWS = list(
    itertools.product(
        ("idle", "running", "closing", "closed"),
        ("", "1", "0"),
        (True, False),
        (False, True),
        (False, True),
        (False, True),
        (False, True),
        (None, NOW - 1, NOW, NOW + 1),
    )
)

# The part's functions, then one call of steer_ready on the row's reads (as the snapshot
# reads them: the session record flat, the notice id or '', the floor's records flat).
_CALL = """
local f = fields(cjson.decode(ARGV[1]))
local ready = steer_ready(f, ARGV[2], cjson.decode(ARGV[3]), ARGV[4], ARGV[5], ARGV[6])
return ready and 1 or 0
"""


def _facts(row: tuple) -> policy.SteerFacts:  # type: ignore[type-arg]
    state, field, default, prompt, wake, flight, floor, retry_at = row
    return policy.SteerFacts(
        state=state,
        agent_inbox=default if field == "" else field == "1",
        prompt_waiting=prompt,
        wake_pending=wake,
        in_flight=flight,
        unconfirmed=floor,
        retry_at=retry_at,
        now_ms=NOW,
    )


def _lua_args(row: tuple) -> list[str]:  # type: ignore[type-arg]
    state, field, default, prompt, wake, flight, floor, retry_at = row
    record = ["state", state, "prompt_waiting", "1" if prompt else "0"]
    if field:
        record += ["agent_inbox", field]
    if wake:
        record += ["wake_pending", "ntc-w"]
    floor_flat = ["ntc-f", json.dumps({"at": 1})] if floor else []
    return [
        json.dumps(record),
        "ntc-old" if flight else "",
        json.dumps(floor_flat),
        "" if retry_at is None else str(retry_at),
        str(NOW),
        "1" if default else "",
    ]


def test_the_lua_steer_rule_is_the_python_one_on_every_row(redis_url: str) -> None:
    # Only the part's functions are defined (the snapshot itself is not called): no key
    # is read or written, so the script names none.
    script = lua_source("parts/snapshot") + "\n" + _CALL
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    pipe = r.pipeline(transaction=False)
    for row in ROWS:
        pipe.eval(script, 0, *_lua_args(row))
    got = pipe.execute()
    differ = [
        row for row, lua in zip(ROWS, got, strict=True) if bool(lua) != policy.steers(_facts(row))
    ]
    assert differ == []
    assert any(got) and not all(got)  # the table has rows on both sides of the rule


def test_the_python_plan_sends_a_steer_in_the_run_exactly_where_the_rule_says() -> None:
    for row in ROWS:
        f = _facts(row)
        view = policy.InboxView(
            state=f.state,
            agent_inbox=f.agent_inbox,
            prompt_waiting=f.prompt_waiting,
            pending=1,
            first_wake_at=None,
            first_pending_at=NOW,
            building=f.in_flight,
            retry_at=f.retry_at,
        )
        plan = policy.decide(view, NOW, 2_000, 600_000)
        info = SessionInfo(
            session="s",
            host="h",
            handle="s",
            state=f.state,
            prompt_waiting=f.prompt_waiting,
            wake_pending="ntc-w" if f.wake_pending else None,
        )
        left = left_over(
            info, "ntc-old" if f.in_flight else None, ["ntc-f"] if f.unconfirmed else [], False
        )
        sent = plan.action == "notice" and not left
        assert sent is policy.steers(f), row
