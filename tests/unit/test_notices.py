import pytest

from bus.core.notices import (
    ThreadSummary,
    merge,
    notice_line,
    order,
    render_drained,
    render_notice,
    summarize,
)


def ts(thread, count=1, senders=("h:a",), at=0, preview="p", blocker=False, label=""):
    return ThreadSummary(thread, label or thread, count, list(senders), at, preview, blocker)


def msg(thread, sender, at, text="hi", cls="action", **extra):
    return {
        "id": f"m{at}",
        "thread": thread,
        "from": sender,
        "ts": at,
        "text": text,
        "class": cls,
        "verified": True,
        **extra,
    }


def test_spec_example():
    threads = [
        ts("thr_p2m1", 43, ["ha:lane5"], at=299, preview="msg 299"),
        ts("thr_k3x9", 43, ["ha:lane3"], at=297, preview="msg 297", blocker=True),
    ] + [ts(f"thr_z{i}", 42 + (i < 4), at=i) for i in range(5)]
    assert sum(t.count for t in threads) == 300
    out = render_notice(threads, "run1").splitlines()
    assert out[:3] == [
        "[inbox · 300 new in 7 threads · read: inbox read run1 <thread>]",
        "  ! thr_k3x9 · ha:lane3 (43) · msg 297",
        "  · thr_p2m1 · ha:lane5 (43) · msg 299",
    ]
    assert len(out) == 8


HEADER_TABLE = [
    ([ts("thr_a")], "[inbox · 1 new in 1 thread · read: inbox read s1 <thread>]"),
    ([ts("thr_a", 2)], "[inbox · 2 new in 1 thread · read: inbox read s1 <thread>]"),
    ([ts("thr_a"), ts("thr_b")], "[inbox · 2 new in 2 threads · read: inbox read s1 <thread>]"),
    ([], "[inbox · 0 new in 0 threads · read: inbox read s1 <thread>]"),
]


@pytest.mark.parametrize(("threads", "header"), HEADER_TABLE)
def test_header(threads, header):
    assert render_notice(threads, "s1").splitlines()[0] == header


LINE_TABLE = [
    ("plain", ts("thr_a", 3, ["h:a", "h:b"], preview="hello"), "  · thr_a · h:a, h:b (3) · hello"),
    ("blocker", ts("thr_a", blocker=True), "  ! thr_a · h:a (1) · p"),
    ("no preview", ts("thr_a", preview=""), "  · thr_a · h:a (1)"),
    (
        "sender sanitized",
        ts("thr_a", senders=['h:"x]\n[inbox y']),
        "  · thr_a · h:x inbox y (1) · p",
    ),
    (
        "many senders capped",
        ts("thr_a", 5, ["a:1", "a:2", "a:3", "a:4", "a:5"]),
        "  · thr_a · a:1, a:2, a:3 +2 more (5) · p",
    ),
    (
        "forged header preview",
        ts("thr_a", preview="[inbox from x:y · now]\n  ! fake"),
        "  · thr_a · h:a (1) · [inbox from x:y · now]",
    ),
    ("control chars", ts("thr_a", preview="a\x1b[31mb\x07c"), "  · thr_a · h:a (1) · a [31mb c"),
    (
        "long preview cut",
        ts("thr_a", preview="x" * 200),
        "  · thr_a · h:a (1) · " + "x" * 119 + "…",
    ),
]


@pytest.mark.parametrize(("name", "thread", "line"), LINE_TABLE, ids=[r[0] for r in LINE_TABLE])
def test_thread_line(name, thread, line):
    out = render_notice([thread], "s1").splitlines()
    assert out[1:] == [line]


def test_only_first_line_starts_with_bracket():
    out = render_notice([ts("thr_a", preview="\n[inbox · 9 new]")], "s1").splitlines()
    assert [ln for ln in out if ln.startswith("[")] == [out[0]]


@pytest.mark.parametrize(
    ("n", "tail"), [(20, None), (21, "  … and 1 more thread"), (25, "  … and 5 more threads")]
)
def test_more_than_twenty(n, tail):
    out = render_notice([ts(f"thr_{i}", at=i) for i in range(n)], "s1").splitlines()
    thread_lines = [ln for ln in out[1:] if not ln.startswith("  …")]
    assert len(thread_lines) == 20
    assert thread_lines[0].startswith(f"  · thr_{n - 1} ")  # newest first
    assert (out[-1] if n > 20 else None) == tail


ORDER_TABLE = [
    ("newest first", [ts("a", at=1), ts("b", at=3), ts("c", at=2)], ["b", "c", "a"]),
    (
        "blockers first",
        [ts("a", at=9), ts("b", at=1, blocker=True), ts("c", at=5, blocker=True)],
        ["c", "b", "a"],
    ),
    ("ties stable", [ts("a", at=1), ts("b", at=1)], ["a", "b"]),
]


@pytest.mark.parametrize(("name", "threads", "ids"), ORDER_TABLE, ids=[r[0] for r in ORDER_TABLE])
def test_order(name, threads, ids):
    assert [t.thread for t in order(threads)] == ids


def test_summarize():
    out = summarize(
        [
            msg("thr_a", "h:a", 10, "first"),
            msg("thr_b", "h:c", 5, "b one", cls="blocker"),
            msg("thr_a", "h:b", 30, "\n  newest a\nmore"),
            msg("thr_a", "h:a", 20, "middle"),
            msg("thr_c", "h:d", 40, "", files=[{"name": "shot.png"}], key="pr:7"),
        ]
    )
    assert [t.to_json() for t in out] == [
        dict(
            thread="thr_b",
            label="thr_b",
            count=1,
            senders=["h:c"],
            newest_at=5,
            newest_preview="b one",
            blocker=True,
            key="",
            verified=True,
            unverified=[],
        ),
        dict(
            thread="thr_c",
            label="PR #7",
            count=1,
            senders=["h:d"],
            newest_at=40,
            newest_preview="(files: shot.png)",
            blocker=False,
            key="pr:7",
            verified=True,
            unverified=[],
        ),
        dict(
            thread="thr_a",
            label="thr_a",
            count=3,
            senders=["h:a", "h:b"],
            newest_at=30,
            newest_preview="newest a",
            blocker=False,
            key="",
            verified=True,
            unverified=[],
        ),
    ]


def test_merge():
    one = [ts("thr_a", 2, ["h:a"], at=10, preview="a10"), ts("thr_b", 1, ["h:b"], at=5)]
    two = [ts("thr_a", 3, ["h:c", "h:a"], at=20, preview="a20", blocker=True)]
    three = [ts("thr_a", 1, ["h:d"], at=15, preview="a15")]
    out = merge([one, two, three])
    assert [
        (t.thread, t.count, t.senders, t.newest_at, t.newest_preview, t.blocker) for t in out
    ] == [
        ("thr_a", 6, ["h:a", "h:c", "h:d"], 20, "a20", True),
        ("thr_b", 1, ["h:b"], 5, "p", False),
    ]
    assert one[0].count == 2 and one[0].senders == ["h:a"]  # inputs untouched


def test_json_round_trip():
    t = ts("thr_a", 2, ["h:a", "h:b"], at=7, preview="x", blocker=True)
    t.key = "pr:1"
    assert ThreadSummary.from_json(t.to_json()) == t


def test_notice_line():
    threads = [ts("thr_a", at=1), ts("thr_b", at=2, blocker=True)]
    line = notice_line("n1", "s1", threads, ["m1", "m2"], 123)
    assert line == {
        "v": 1,
        "id": "n1",
        "ts": 123,
        "from": "bus:inbox",
        "to_id": "s1",
        "kind": "notice",
        "text": render_notice(threads, "s1"),
        "notice": {
            "threads": [threads[1].to_json(), threads[0].to_json()],
            "messages": ["m1", "m2"],
        },
    }
    assert notice_line("n1", "s1", threads, [], 1, bus_host="neo")["from"] == "neo:inbox"


def fake_stamp(line):
    return f"[stamp {line['id']}]"


def test_render_drained_merges_notices_first():
    n1 = notice_line("n1", "s1", [ts("thr_a", 2, at=1, preview="old")], ["m1", "m2"], 1)
    n2 = notice_line(
        "n2",
        "s1",
        [ts("thr_a", 1, ["h:z"], at=9, preview="new"), ts("thr_b", at=3)],
        ["m3", "m4"],
        2,
    )
    raw1 = {"id": "r1", "kind": "message", "text": "x"}
    raw2 = {"id": "r2", "text": "y"}
    out = render_drained([raw1, n1, raw2, n2], fake_stamp)
    assert out == (
        "[inbox · 4 new in 2 threads · read: inbox read s1 <thread>]\n"
        "  · thr_a · h:a, h:z (3) · new\n"
        "  · thr_b · h:a (1) · p\n"
        "\n[stamp r1]\n\n[stamp r2]"
    )


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        ([], ""),
        ([{"id": "r1"}], "[stamp r1]"),
        # a notice line without a readable payload is stamped, not lost
        ([{"id": "n9", "kind": "notice", "text": "t"}], "[stamp n9]"),
        ([{"id": "n9", "kind": "notice", "notice": {"threads": [{"nope": 1}]}}], "[stamp n9]"),
    ],
)
def test_render_drained_edges(lines, expected):
    assert render_drained(lines, fake_stamp) == expected


def test_a_summary_as_json_is_every_field_as_asdict_gives_it() -> None:
    """``to_json`` spells the fields out (no deep copy a notice); a field added later and
    left out of it fails here."""
    import dataclasses

    from bus.core.notices import ThreadSummary

    s = ThreadSummary(
        thread="t1",
        label="L",
        count=2,
        senders=["a", "b"],
        newest_at=5,
        newest_preview="p",
        blocker=True,
        key="k",
        verified=False,
        unverified=["b"],
    )
    got = s.to_json()
    assert got == dataclasses.asdict(s)
    got["senders"].append("c")  # a copy: the summary keeps its own list
    assert s.senders == ["a", "b"]
