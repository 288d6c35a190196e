import re

import pytest

from bus.core.models import THREAD_ID_PATTERN
from bus.core.threads import pr_in_first_line, thread_id, thread_key, thread_label


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        # explicit thread wins over everything
        (dict(thread="thr_abc", pr=5, topic="t", text="#9"), "thread:thr_abc"),
        # pr next
        (dict(thread=None, pr=5, topic="t", text="#9"), "pr:5"),
        # topic next
        (dict(thread=None, pr=None, topic="deploy", text="#9"), "topic:deploy"),
        # sender + PR named in the first line
        (dict(thread=None, pr=None, topic=None, text="see #123 please"), "from:h:a#pr:123"),
        (dict(thread=None, pr=None, topic=None, text="PR 77 is red"), "from:h:a#pr:77"),
        (dict(thread=None, pr=None, topic=None, text="pr #8 done"), "from:h:a#pr:8"),
        (dict(thread=None, pr=None, topic=None, text="merged pr-42"), "from:h:a#pr:42"),
        (dict(thread=None, pr=None, topic=None, text="x/pull/9001 ok"), "from:h:a#pr:9001"),
        (dict(thread=None, pr=None, topic=None, text="\n\n  #5 first\n#6"), "from:h:a#pr:5"),
        # first match by position on the line
        (dict(thread=None, pr=None, topic=None, text="PR 3 then #4"), "from:h:a#pr:3"),
        # only the first non-blank line counts
        (dict(thread=None, pr=None, topic=None, text="hello\nPR 3"), "from:h:a"),
        # not PR references
        (dict(thread=None, pr=None, topic=None, text="colour #12abc"), "from:h:a"),
        (dict(thread=None, pr=None, topic=None, text="sprint 12"), "from:h:a"),
        (dict(thread=None, pr=None, topic=None, text="#0"), "from:h:a"),
        (dict(thread=None, pr=None, topic=None, text=""), "from:h:a"),
        # empty strings are "not given"
        (dict(thread="", pr=None, topic="", text="hi"), "from:h:a"),
    ],
)
def test_thread_key(kwargs, expected):
    assert thread_key(sender="h:a", **kwargs) == expected


@pytest.mark.parametrize(
    ("text", "pr"),
    [("#1", 1), ("PR#2", 2), ("Pr  #3", 3), ("PULL/4", 4), ("nothing", None), ("abc#5", 5)],
)
def test_pr_in_first_line(text, pr):
    assert pr_in_first_line(text) == pr


def test_thread_id_stable_and_valid():
    a = thread_id("sid1", "pr:5")
    assert a == thread_id("sid1", "pr:5")
    assert re.fullmatch(THREAD_ID_PATTERN, a)
    assert len(a) == len("thr_") + 16


@pytest.mark.parametrize(
    ("left", "right"),
    [
        (("sid1", "pr:5"), ("sid2", "pr:5")),
        (("sid1", "pr:5"), ("sid1", "pr:6")),
        (("sid1", "from:h:a"), ("sid1", "from:h:b")),
    ],
)
def test_thread_id_differs(left, right):
    assert thread_id(*left) != thread_id(*right)


def test_thread_id_keeps_explicit_thread():
    assert thread_id("anyone", "thread:thr_keepme") == "thr_keepme"


@pytest.mark.parametrize(
    ("key", "label"),
    [
        ("pr:123", "PR #123"),
        ("topic:deploy", "topic deploy"),
        ("from:h:a#pr:123", "h:a · PR #123"),
        ("from:h:a", "h:a"),
        ("from:h:x#pr:y", "h:x#pr:y"),
        ("thread:thr_abc", "thr_abc"),
        ("thr_abc", "thr_abc"),
    ],
)
def test_thread_label(key, label):
    assert thread_label(key) == label
