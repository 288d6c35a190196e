import itertools

import pytest

from bus.core.decisions import (
    CONFIRMED,
    DECLINED,
    DROPPED,
    MAX_DECISION_MESSAGE,
    OFFERED,
    REQUESTED,
    Result,
    check_message,
    parse_window,
    transition,
    validate_windows,
)
from bus.core.errors import BadInput

STATES = ["REQUESTED", "OFFERED", "CONFIRMED", "DECLINED", "DROPPED"]
DECISIONS = ["accept", "decline", "counter", "clarify", "withdraw"]
ACTORS = ["sender", "recipient", "other"]
OFFERED_BY = ["sender", "recipient", None]


def expected(state, decision, actor, offered_by):
    """Written from the documented wake rules, independently of RULES."""
    if state == "OFFERED" and offered_by is None:
        return ValueError
    if actor == "other":
        return Result(False, None, "not_a_party")
    if state in ("CONFIRMED", "DECLINED", "DROPPED"):
        return Result(False, None, "thread_terminal")
    bad = Result(False, None, "invalid_for_state")
    if decision == "clarify":
        # an envelope, no state change; an OFFERED thread keeps its offerer
        return Result(True, state, None, offered_by if state == "OFFERED" else None)
    if decision == "withdraw":
        ok = state == "REQUESTED" and actor == "sender"
        return Result(True, "DROPPED", None) if ok else bad
    # accept / decline / counter: only the side that must answer may do them
    answering = (
        "recipient"
        if state == "REQUESTED"
        else ("recipient" if offered_by == "sender" else "sender")
    )
    if actor != answering:
        return bad
    if decision == "accept":
        return Result(True, "CONFIRMED", None)
    if decision == "decline":
        return Result(True, "DECLINED", None)
    return Result(True, "OFFERED", None, actor)


ALL = list(itertools.product(STATES, DECISIONS, ACTORS, OFFERED_BY))


@pytest.mark.parametrize(("state", "decision", "actor", "offered_by"), ALL)
def test_exhaustive(state, decision, actor, offered_by):
    want = expected(state, decision, actor, offered_by)
    if want is ValueError:
        with pytest.raises(ValueError):
            transition(state, decision, actor, offered_by)
    else:
        assert transition(state, decision, actor, offered_by) == want


def test_exhaustive_covers_every_combination():
    assert len(ALL) == 5 * 5 * 3 * 3


NAMED = [
    (
        "recipient accepts request",
        (REQUESTED, "accept", "recipient", None),
        (True, CONFIRMED, None),
    ),
    ("recipient declines", (REQUESTED, "decline", "recipient", None), (True, DECLINED, None)),
    ("recipient counters", (REQUESTED, "counter", "recipient", None), (True, OFFERED, None)),
    ("sender clarifies", (REQUESTED, "clarify", "sender", None), (True, REQUESTED, None)),
    ("sender withdraws", (REQUESTED, "withdraw", "sender", None), (True, DROPPED, None)),
    (
        "recipient cannot withdraw",
        (REQUESTED, "withdraw", "recipient", None),
        (False, None, "invalid_for_state"),
    ),
    (
        "sender cannot accept own request",
        (REQUESTED, "accept", "sender", None),
        (False, None, "invalid_for_state"),
    ),
    (
        "accepting your own offer",
        (OFFERED, "accept", "recipient", "recipient"),
        (False, None, "invalid_for_state"),
    ),
    ("sender accepts counter", (OFFERED, "accept", "sender", "recipient"), (True, CONFIRMED, None)),
    ("sender counters back", (OFFERED, "counter", "sender", "recipient"), (True, OFFERED, None)),
    (
        "no withdraw after offer",
        (OFFERED, "withdraw", "sender", "recipient"),
        (False, None, "invalid_for_state"),
    ),
    (
        "stranger on terminal is not_a_party first",
        (CONFIRMED, "accept", "other", None),
        (False, None, "not_a_party"),
    ),
    (
        "terminal refuses clarify",
        (DECLINED, "clarify", "sender", None),
        (False, None, "thread_terminal"),
    ),
    (
        "dropped refuses withdraw",
        (DROPPED, "withdraw", "sender", None),
        (False, None, "thread_terminal"),
    ),
]


@pytest.mark.parametrize(("name", "args", "want"), NAMED, ids=[n[0] for n in NAMED])
def test_named(name, args, want):
    r = transition(*args)
    assert (r.ok, r.new_state, r.error) == want


@pytest.mark.parametrize(
    ("args", "offered_by"),
    [
        ((REQUESTED, "counter", "recipient", None), "recipient"),
        ((OFFERED, "counter", "sender", "recipient"), "sender"),
        ((OFFERED, "clarify", "sender", "recipient"), "recipient"),
        ((OFFERED, "clarify", "recipient", "recipient"), "recipient"),
        ((OFFERED, "accept", "sender", "recipient"), None),
    ],
)
def test_offered_by_after(args, offered_by):
    assert transition(*args).offered_by == offered_by


@pytest.mark.parametrize(
    ("args", "exc"),
    [
        ((REQUESTED, "approve", "sender", None), BadInput),
        (("OPEN", "accept", "sender", None), ValueError),
        ((REQUESTED, "accept", "admin", None), ValueError),
        ((OFFERED, "accept", "sender", "other"), ValueError),
    ],
)
def test_bad_arguments(args, exc):
    with pytest.raises(exc):
        transition(*args)


W = {"start": "2026-10-01T10:00:00+02:00", "end": "2026-10-01T11:00:00+02:00"}
NAIVE = {"start": "2026-10-01T10:00", "end": "2026-10-01T11:00"}

WINDOW_OK = [
    ("mr counter one", "counter", "meeting_request", [W], [W]),
    ("mr counter ten", "counter", "meeting_request", [NAIVE] * 10, [NAIVE] * 10),
    ("naive pair", "counter", "meeting_request", [NAIVE], [NAIVE]),
    (
        "Z suffix",
        "counter",
        "meeting_request",
        [{"start": "2026-10-01T10:00Z", "end": "2026-10-01T09:30-01:00"}],
        [{"start": "2026-10-01T10:00Z", "end": "2026-10-01T09:30-01:00"}],
    ),
    (
        "tz hint kept",
        "counter",
        "meeting_request",
        [{**W, "tz_hint": " Europe/Berlin "}],
        [{**W, "tz_hint": "Europe/Berlin"}],
    ),
    ("task counter none", "counter", "task", [], []),
    ("accept none", "accept", "meeting_request", None, []),
    ("clarify with window", "clarify", "meeting_request", [W], [W]),
]


@pytest.mark.parametrize(
    ("name", "decision", "ttype", "windows", "out"), WINDOW_OK, ids=[r[0] for r in WINDOW_OK]
)
def test_validate_windows_ok(name, decision, ttype, windows, out):
    assert validate_windows(decision, ttype, windows) == out


WINDOW_BAD = [
    ("mr counter needs windows", "counter", "meeting_request", [], "1-10 windows"),
    ("mr counter None", "counter", "meeting_request", None, "1-10 windows"),
    ("eleven", "counter", "meeting_request", [W] * 11, "at most 10"),
    ("eleven on task too", "accept", "task", [W] * 11, "at most 10"),
    (
        "end before start",
        "counter",
        "meeting_request",
        [{"start": W["end"], "end": W["start"]}],
        "before end",
    ),
    (
        "equal",
        "counter",
        "meeting_request",
        [{"start": W["start"], "end": W["start"]}],
        "before end",
    ),
    (
        "mixed aware naive",
        "counter",
        "meeting_request",
        [{"start": W["start"], "end": "2026-10-01T12:00"}],
        "UTC offset",
    ),
    ("not iso", "counter", "meeting_request", [{"start": "tomorrow", "end": W["end"]}], "ISO-8601"),
    ("missing end", "counter", "meeting_request", [{"start": W["start"]}], "end must be"),
    ("unknown field", "counter", "meeting_request", [{**W, "tz": "x"}], "unknown field"),
    ("not an object", "counter", "meeting_request", ["2026/2027"], "must be an object"),
    ("bad tz hint", "counter", "meeting_request", [{**W, "tz_hint": ""}], "tz_hint"),
    ("bad type", "counter", "lunch", [W], "unknown thread type"),
]


@pytest.mark.parametrize(
    ("name", "decision", "ttype", "windows", "msg"), WINDOW_BAD, ids=[r[0] for r in WINDOW_BAD]
)
def test_validate_windows_bad(name, decision, ttype, windows, msg):
    with pytest.raises(BadInput, match=msg):
        validate_windows(decision, ttype, windows)


@pytest.mark.parametrize(
    ("s", "out"),
    [
        (
            "2026-10-01T10:00/2026-10-01T11:00",
            {"start": "2026-10-01T10:00", "end": "2026-10-01T11:00"},
        ),
        (
            "2026-10-01T10:00Z/2026-10-01T11:00Z/America/New_York",
            {
                "start": "2026-10-01T10:00Z",
                "end": "2026-10-01T11:00Z",
                "tz_hint": "America/New_York",
            },
        ),
    ],
)
def test_parse_window(s, out):
    assert parse_window(s) == out


@pytest.mark.parametrize(
    "s", ["", "2026-10-01T10:00", "/2026-10-01T11:00", "2026-10-01T11:00/2026-10-01T10:00", "a/b"]
)
def test_parse_window_bad(s):
    with pytest.raises(BadInput):
        parse_window(s)


@pytest.mark.parametrize(
    ("message", "ok"),
    [
        (None, True),
        ("", True),
        ("x" * MAX_DECISION_MESSAGE, True),
        ("x" * (MAX_DECISION_MESSAGE + 1), False),
    ],
)
def test_check_message(message, ok):
    if ok:
        assert check_message(message) == message
    else:
        with pytest.raises(BadInput, match="2000"):
            check_message(message)
