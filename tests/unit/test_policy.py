from dataclasses import replace

import pytest

from bus.core.policy import (
    InboxView,
    Plan,
    WakeFacts,
    decide,
    floor_times,
    is_first_work,
    may_wake,
    retry_delay_s,
)

BASE = WakeFacts(
    msg_class="action",
    kind="message",
    from_session="s-other",
    from_handle="h:other",
    receiver_parent="s-parent",
    receiver_delegator="h:deleg",
    receiver_turns=3,
    receiver_gave_work_to_sender=False,
)

WAKE_TABLE = [
    # name, overrides, expected
    ("reply never", dict(kind="reply", msg_class="blocker"), (False, "reply")),
    ("retraction never", dict(kind="retraction", msg_class="blocker"), (False, "retraction")),
    ("notice never", dict(kind="notice", receiver_turns=0), (False, "notice")),
    ("fyi never", dict(msg_class="fyi", from_session="s-parent"), (False, "fyi")),
    ("fyi first work", dict(msg_class="fyi", receiver_turns=0), (False, "fyi")),
    ("fyi from member", dict(msg_class="fyi", kind="item", from_member=True), (False, "fyi")),
    ("blocker", dict(msg_class="blocker"), (True, "blocker")),
    ("alias question", dict(msg_class="question"), (True, "blocker")),
    ("alias block", dict(msg_class="Block"), (True, "blocker")),
    ("member item", dict(kind="item", from_member=True), (True, "member")),
    ("non-member item", dict(kind="item"), (False, "not_from_parent")),
    ("action from parent sid", dict(from_session="s-parent"), (True, "parent")),
    (
        "action from parent handle",
        dict(from_handle="s-parent", from_session=None),
        (True, "parent"),
    ),
    ("action from delegator handle", dict(from_handle="h:deleg"), (True, "delegator")),
    (
        "alias result from parent",
        dict(msg_class="result", from_session="s-parent"),
        (True, "parent"),
    ),
    ("action from stranger", {}, (False, "not_from_parent")),
    (
        "action no parent recorded",
        dict(receiver_parent=None, from_session=None),
        (False, "not_from_parent"),
    ),
    (
        "report, gave work",
        dict(msg_class="report", receiver_gave_work_to_sender=True),
        (True, "report"),
    ),
    ("report, no work given", dict(msg_class="report"), (False, "not_given_work")),
    (
        "report from parent only",
        dict(msg_class="report", from_session="s-parent"),
        (False, "not_given_work"),
    ),
    ("decision", dict(kind="decision"), (True, "decision")),
    ("decision fyi", dict(kind="decision", msg_class="fyi"), (False, "fyi")),
    ("first work action", dict(receiver_turns=0), (True, "first_work")),
    ("first work report", dict(msg_class="report", receiver_turns=0), (True, "first_work")),
    ("parent beats first work", dict(receiver_turns=0, from_session="s-parent"), (True, "parent")),
]


@pytest.mark.parametrize(
    ("name", "overrides", "expected"), WAKE_TABLE, ids=[r[0] for r in WAKE_TABLE]
)
def test_may_wake(name, overrides, expected):
    assert may_wake(replace(BASE, **overrides)) == expected


FIRST_WORK_TABLE = [
    (dict(receiver_turns=0), True),
    (dict(receiver_turns=0, msg_class="blocker"), True),
    (dict(receiver_turns=0, msg_class="report"), True),
    (dict(receiver_turns=1), False),
    (dict(receiver_turns=0, msg_class="fyi"), False),
    (dict(receiver_turns=0, kind="reply"), False),
    (dict(receiver_turns=0, kind="decision"), False),
    (dict(receiver_turns=0, kind="item", from_member=True), False),
]


@pytest.mark.parametrize(("overrides", "expected"), FIRST_WORK_TABLE)
def test_is_first_work(overrides, expected):
    assert is_first_work(replace(BASE, **overrides)) is expected


NOW = 1_000_000
DEB = 2_000
FLUSH = 600_000
IDLE = InboxView(
    state="idle",
    agent_inbox=True,
    prompt_waiting=False,
    pending=3,
    first_wake_at=None,
    first_pending_at=NOW - 10,
    building=False,
    retry_at=None,
)

DECIDE_TABLE = [
    ("closed is raw", dict(state="closed"), Plan("raw", None, "closed")),
    ("closing is raw", dict(state="closing", building=True), Plan("raw", None, "closing")),
    (
        "inbox off is raw",
        dict(agent_inbox=False, state="running"),
        Plan("raw", None, "agent_inbox_off"),
    ),
    ("nothing pending", dict(pending=0, first_wake_at=NOW), Plan("nothing", None, "no_pending")),
    ("building waits", dict(building=True, state="running"), Plan("wait", None, "building")),
    (
        "retry in future",
        dict(state="running", retry_at=NOW + 5),
        Plan("schedule", NOW + 5, "retry"),
    ),
    ("retry due now", dict(state="running", retry_at=NOW), Plan("notice", None, "steer")),
    ("retry past", dict(state="running", retry_at=NOW - 1), Plan("notice", None, "steer")),
    ("running steers", dict(state="running"), Plan("notice", None, "steer")),
    (
        "running, prompt waiting",
        dict(state="running", prompt_waiting=True),
        Plan("wait", None, "prompt_waiting"),
    ),
    ("idle wake due", dict(first_wake_at=NOW - DEB), Plan("wake", None, "debounced")),
    ("idle wake past due", dict(first_wake_at=NOW - DEB - 1), Plan("wake", None, "debounced")),
    (
        "idle wake debounce",
        dict(first_wake_at=NOW - 500),
        Plan("schedule", NOW - 500 + DEB, "debounce"),
    ),
    ("idle flush not yet", {}, Plan("schedule", NOW - 10 + FLUSH, "flush")),
    ("idle flush due", dict(first_pending_at=NOW - FLUSH), Plan("wake", None, "flush")),
    ("idle flush age unknown", dict(first_pending_at=None), Plan("wake", None, "flush")),
    (
        "idle retry in future",
        dict(first_wake_at=NOW - DEB, retry_at=NOW + 30_000),
        Plan("schedule", NOW + 30_000, "retry"),
    ),
    # A notice written for a running turn that ended before the harness drained it.
    (
        "idle, floor notice with a blocker, before the debounce",
        dict(pending=0, floor_wake_at=NOW - 10, floor_first_at=NOW - 10),
        Plan("schedule", NOW - 10 + DEB, "debounce"),
    ),
    (
        "idle, floor notice with a blocker, debounce passed",
        dict(pending=0, floor_wake_at=NOW - DEB, floor_first_at=NOW - DEB),
        Plan("wake_floor", None, "debounced"),
    ),
    (
        "idle, floor notice without a blocker waits for the flush",
        dict(pending=0, floor_first_at=NOW - 10),
        Plan("schedule", NOW - 10 + FLUSH, "flush"),
    ),
    (
        "idle, floor notice past the flush",
        dict(pending=0, floor_first_at=NOW - FLUSH),
        Plan("wake_floor", None, "flush"),
    ),
    (
        "running, floor notice: its harness drains it",
        dict(state="running", pending=0, floor_wake_at=NOW - DEB, floor_first_at=NOW - DEB),
        Plan("nothing", None, "no_pending"),
    ),
    (
        "idle, floor notice, a notice in flight",
        dict(pending=0, building=True, floor_wake_at=NOW - DEB, floor_first_at=NOW - DEB),
        Plan("nothing", None, "no_pending"),
    ),
]


@pytest.mark.parametrize(
    ("name", "overrides", "expected"), DECIDE_TABLE, ids=[r[0] for r in DECIDE_TABLE]
)
def test_decide(name, overrides, expected):
    assert decide(replace(IDLE, **overrides), NOW, DEB, FLUSH) == expected


FLOOR_TIMES_TABLE = [
    ("nothing on the floor", [], (None, None)),
    (
        "a blocker and an fyi",
        [{"ids": ["a", "b"], "new": ["a", "5", "b", "3"], "wake": ["a", "5"]}],
        (5, 3),
    ),
    (
        "taken by a drain",
        [{"ids": ["a"], "new": ["a", "5"], "wake": ["a", "5"], "gone": 9}],
        (None, None),
    ),
    (
        "already woken for",
        [{"ids": ["a"], "new": ["a", "5"], "wake": ["a", "5"], "woken": 9}],
        (None, None),
    ),
    (
        "two notices",
        [{"ids": ["a"], "new": ["a", "7"]}, {"ids": ["b"], "new": ["b", "4"], "wake": ["b", "4"]}],
        (4, 4),
    ),
    ("a torn pair is skipped", [{"ids": ["a"], "new": ["a", "x"]}], (None, None)),
]


@pytest.mark.parametrize(("name", "records", "expected"), FLOOR_TIMES_TABLE)
def test_floor_times(name, records, expected):
    assert floor_times(records) == expected


def test_decide_unknown_state():
    with pytest.raises(ValueError):
        decide(replace(IDLE, state="sleeping"), NOW, DEB, FLUSH)


@pytest.mark.parametrize(
    ("retry_s", "faults", "cap_s", "delay"),
    [
        (30.0, 1, 600.0, 30.0),  # the first failure: the configured retry
        (30.0, 2, 600.0, 60.0),  # doubled per failure in a row
        (30.0, 5, 600.0, 480.0),
        (30.0, 6, 600.0, 600.0),  # capped
        (30.0, 500, 600.0, 600.0),  # a long run of failures stays at the cap
        (30.0, 0, 600.0, 30.0),  # no count kept: as the first
        (900.0, 3, 600.0, 900.0),  # a retry longer than the cap is never shortened
    ],
)
def test_retry_delay_backs_off_capped(retry_s, faults, cap_s, delay):
    assert retry_delay_s(retry_s, faults, cap_s) == delay
