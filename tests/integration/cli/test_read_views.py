"""The views the library and the read lane both answer with (bus.core.thread_views,
bus.core.item_views, bus.core.status_view) and the backlogs part both mix in
(bus.store.backlogs): pure tables, and the backlogs on a real Redis."""

from __future__ import annotations

from typing import Any

import pytest

from bus.api import Bus
from bus.core import item_views, receipt_rules, status_view, thread_views
from bus.core.version import __version__
from bus.store.packing import json_list

# -- the thread rows ---------------------------------------------------------------------


def _rec(thread: str, mark: str, cls: str = "action") -> dict[str, Any]:
    return {"thread": thread, "mark": mark, "class": cls}


META = {"key": "k", "label": "L", "senders": '["h:bob"]', "count": "3", "newest_at": "9"}


@pytest.mark.parametrize(
    ("meta", "recs", "want"),
    [
        ({}, [], {"key": "", "label": "thr_a", "from": [], "unread": 0, "new": 0, "count": 0,
                  "newestAt": 0, "newestPreview": "", "class": "action"}),
        (META, [_rec("thr_a", "new"), _rec("thr_a", "noticed"), _rec("thr_a", "read")],
         {"key": "k", "label": "L", "from": ["h:bob"], "unread": 2, "new": 1, "count": 3,
          "newestAt": 9, "newestPreview": "", "class": "action"}),
        ({"class": "info", "senders": "{}"}, [_rec("thr_a", "noticed", "blocker")],
         {"from": [], "unread": 1, "new": 0, "class": "blocker"}),
        ({"class": "info"}, [_rec("thr_a", "read", "blocker"), _rec("thr_b", "new", "blocker")],
         {"unread": 0, "class": "info"}),
        ({"state": "closed"}, [], {"state": "closed"}),
    ],
)  # fmt: skip
def test_a_thread_row(
    meta: dict[str, Any], recs: list[dict[str, Any]], want: dict[str, Any]
) -> None:
    [row] = thread_views.thread_rows(["thr_a"], [meta], recs, json_list)
    assert row["threadId"] == "thr_a"
    assert {k: row[k] for k in want} == want
    assert ("state" in row) is ("state" in meta)


def test_thread_rows_keep_the_order_of_the_ids() -> None:
    rows = thread_views.thread_rows(["thr_b", "thr_a"], [{}, {}], [], json_list)
    assert [r["threadId"] for r in rows] == ["thr_b", "thr_a"]


def _msg(n: int, **more: Any) -> dict[str, Any]:
    return {"id": f"m{n}", "from": "h:bob", "ts": n, **more}


@pytest.mark.parametrize(
    ("mark", "mark_read", "read", "withdrawn"),
    [
        (None, False, True, None),  # no record of its own: the session's own message
        ("new", False, False, None),
        ("noticed", False, False, None),
        ("new", True, True, None),
        ("read", False, True, None),
        ("answered", False, True, None),
        ("retracted", True, False, "retracted"),
        ("removed", False, False, "removed"),
    ],
)
def test_a_message_in_a_thread(
    mark: str | None, mark_read: bool, read: bool, withdrawn: str | None
) -> None:
    recs = {"m1": {"id": "m1", "mark": mark}} if mark else {}
    view = thread_views.thread_view("thr_a", {}, [_msg(1)], recs, mark_read=mark_read)
    [item] = view["messages"]
    assert item["read"] is read
    assert item.get("withdrawn") == withdrawn


def test_a_thread_view() -> None:
    msgs = [_msg(1, verified=True, files=["a.png"], kind="answer"), _msg(2, verified="yes")]
    view = thread_views.thread_view("thr_a", {"label": "L", "state": "closed"}, msgs, {})
    assert list(view) == ["threadId", "label", "messages", "state"]
    first, second = view["messages"]
    assert first == {
        "id": "m1", "from": "h:bob", "fromSession": None, "class": "action", "kind": "answer",
        "at": 1, "text": "", "read": True, "verified": True, "files": ["a.png"],
    }  # fmt: skip
    assert second["verified"] is False and "files" not in second
    assert "state" not in thread_views.thread_view("thr_a", {}, [], {})


# -- the item view -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "statuses", "want"),
    [
        ({"by": "agent", "text": "hi", "member": "ann"}, {}, {"from": "you", "text": "hi"}),
        ({"member": "ann", "text": "t"}, {"ann": "active"}, {"from": "ann", "text": "t"}),
        ({"member": "ann"}, {"ann": "removed"}, {"from": "a former member", "text": ""}),
        ({"member": "ann"}, {}, {"from": "a former member", "text": ""}),
        ({"by": "agent", "files": ("a", "b")}, {}, {"from": "you", "text": "", "files": ["a", "b"]}),
        ({"by": "agent", "files": []}, {}, {"from": "you", "text": ""}),
    ],
)  # fmt: skip
def test_an_entry_view(
    entry: dict[str, Any], statuses: dict[str, str], want: dict[str, Any]
) -> None:
    assert item_views.entry_view(entry, statuses) == want


def test_the_inbox_view_orders_items_and_reads_each_workspace_once() -> None:
    items = [
        {"key": "b", "updatedAt": 5, "workspace": "acme", "title": "B", "extra": 1},
        {"key": "a", "updatedAt": 5, "workspace": "acme"},
        {"key": "c", "updatedAt": 9},
        {"key": "d"},
    ]
    asked: list[str] = []

    def members_of(ws: str) -> dict[str, str]:
        asked.append(ws)
        return {"ann": "active"}

    threads = {"a": [{"member": "ann", "text": "x"}], "c": [{"member": "ann"}]}
    out = item_views.inbox_view(items, members_of, lambda key: threads.get(key, []))
    assert [i["key"] for i in out] == ["c", "a", "b", "d"]
    assert asked == ["acme"]
    assert list(out[2]) == [*item_views.VIEW_FIELDS, "thread"]  # "extra" is not shown
    assert out[1]["thread"] == [{"from": "ann", "text": "x"}]
    assert out[0]["thread"] == [{"from": "a former member", "text": ""}]  # no workspace


# -- the status report -------------------------------------------------------------------


def test_a_heartbeat_names_its_queue() -> None:
    assert status_view.queue_of("scheduler") is None
    assert status_view.queue_of("h1") == status_view.host_queue("h1") == "host.h1"


@pytest.mark.parametrize(
    ("fields", "want"),
    [
        ({"floor": "m1\t/srv/home", "pid": "41"}, {"machine": "m1", "home": "/srv/home", "pid": 41}),
        ({"floor": "m1\t/a\tb"}, {"machine": "m1", "home": "/a\tb"}),
        ({"floor": "m1", "pid": "x"}, {"machine": "m1", "home": ""}),
        ({}, {"machine": "", "home": ""}),
    ],
)  # fmt: skip
def test_a_floor(fields: dict[str, str], want: dict[str, Any]) -> None:
    assert status_view.floor_json(fields) == want


def test_a_floor_row() -> None:
    assert status_view.floor_row({}, {}) == {}
    claim = {"floor": "m1\t/h", "pid": "7"}
    refusal = {"floor": "m2\t/g", "pid": "8", "at": "99", "holder": "m1\t/h", "holder_pid": "7"}
    assert status_view.floor_row(claim, refusal) == {
        "floor": {"machine": "m1", "home": "/h", "pid": 7},
        "refused": {
            "machine": "m2", "home": "/g", "pid": 8, "at": 99,
            "holder": {"machine": "m1", "home": "/h", "pid": 7},
        },
    }  # fmt: skip
    assert "at" not in status_view.floor_row({}, {"floor": "m2\t/g", "at": "soon"})["refused"]


def test_worker_rows() -> None:
    beats = [
        ("hosta", {"beat": "9000", "progress": "7950", "pid": "41", "done": "3"}, 2),
        ("scheduler", {"beat": "10000"}, 0),
        ("hostb", {}, 0),
        ("scheduler.hostb", {"beat": "-5"}, 0),
    ]
    asked: list[list[str]] = []

    def floors(hosts: list[str]) -> list[tuple[dict[str, str], dict[str, str]]]:
        asked.append(hosts)
        return [({"floor": "m\t/h"} if h == "hosta" else {}, {}) for h in hosts]

    rows = status_view.worker_rows(beats, 10_000, floors)
    assert asked == [["hosta", "hostb"]]  # the hosts only, once
    assert rows == [
        {"name": "hosta", "role": "worker", "state": "up", "beat_age_s": 1.0,
         "progress_age_s": 2.0, "pid": 41, "done": 3, "queue": 2,
         "floor": {"machine": "m", "home": "/h"}},
        {"name": "scheduler", "role": "scheduler", "state": "up", "beat_age_s": 0.0},
        {"name": "hostb", "role": "worker", "state": "down", "queue": 0},
        {"name": "scheduler.hostb", "role": "scheduler", "host": "hostb", "state": "down",
         "beat_age_s": 10.0},
    ]  # fmt: skip
    # A beat from a clock ahead shows age 0, not a negative one.
    [row] = status_view.worker_rows([("scheduler", {"beat": "20000"}, 0)], 10_000, floors)
    assert row["beat_age_s"] == 0.0


def test_the_memory_report_leaves_out_what_does_not_parse() -> None:
    raw = {"a": '{"state": "kept"}', "b": "{not json", "c": "1"}
    assert status_view.memory_report(raw) == {"a": {"state": "kept"}, "c": 1}


def test_the_status_report() -> None:
    out = status_view.status_report(
        host="h", store="redis://***@x", home="/h",
        sessions=[{"session": "s1", "parent": None, "turns": 0}, {"session": "s2"}],
        backlogs=[3, 0], workers=[], memory={},
    )  # fmt: skip
    assert out == {
        "ok": True, "host": "h", "version": __version__, "store": "redis://***@x", "home": "/h",
        "sessions": [{"session": "s1", "turns": 0, "backlog": 3}, {"session": "s2", "backlog": 0}],
        "workers": [], "processes": [], "memory_settings": {},
    }  # fmt: skip
    off = {"state": "off", "reason": "r", "fix": "f"}
    shown = status_view.status_report(
        host="h", store="", home="", sessions=[{"session": "s1"}, {"session": "s2"}],
        backlogs=[0, 0], workers=[], memory={}, wake_off={"s2": off},
    )["sessions"]  # fmt: skip
    assert "wake" not in shown[0] and shown[1]["wake"] == off
    with pytest.raises(ValueError):
        status_view.status_report(
            host="h", store="", home="", sessions=[{}], backlogs=[], workers=[], memory={}
        )


# -- the backlogs, on a real Redis -------------------------------------------------------


def test_the_backlogs_count_what_the_delivery_has_not_taken(bus: Bus) -> None:
    store = bus.store
    for sid in ("bl1", "bl2"):
        bus.open_session(sid)
    assert store.queue.backlogs([]) == []
    assert store.queue.backlogs(["bl1", "bl2", "nobody"]) == [0, 0, 0]
    for n in range(3):
        store.queue.append("bl1", f"m{n}", "{}", "{}")
    assert store.queue.backlogs(["bl1", "bl2"]) == [3, 0]
    assert store.queue.backlogs(["bl1"], cap=2) == [2]
    rows = store.queue.read_after("bl1", "0-0")
    store.queue.advance("bl1", rows[0][0])
    assert store.queue.backlog("bl1") == 2
    store.queue.advance("bl1", rows[-1][0])
    assert store.queue.backlog("bl1") == 0


# -- the outbox --------------------------------------------------------------------------


def test_the_outbox_view_pages_filters_and_drops_what_aged_out() -> None:
    outbox = [f"to{n}|m{n}" for n in range(250)]
    aged = {"m3", "m120"}
    dropped: list[str] = []

    def page_of(start: int, count: int) -> list[str]:
        return outbox[start : start + count]

    def receipts_of(rows: list[tuple[str, str]]) -> list[dict[str, Any] | None]:
        return [
            None if i in aged else {"id": i, "to": to, "state": "read" if int(i[1:]) % 2 else "stored", "_from": "x"}
            for to, i in rows
        ]  # fmt: skip

    def gone(entries: list[str]) -> None:
        dropped.extend(entries)
        for e in entries:
            outbox.remove(e)

    got = receipt_rules.outbox_view(150, None, page_of, receipts_of, gone)
    assert dropped == ["to3|m3", "to120|m120"]
    assert got[0] == {"id": "m0", "to": "to0", "state": "stored"}  # no "_" fields
    # The second page starts where the first ended, one entry up for the one dropped.
    assert [r["id"] for r in got] == [f"m{n}" for n in range(250) if n not in (3, 120)][:150]
    read = receipt_rules.outbox_view(20, "read", page_of, receipts_of, gone)
    assert [r["id"] for r in read] == [f"m{n}" for n in range(1, 250, 2) if n != 3][:20]
    assert receipt_rules.outbox_view(5, None, lambda s, c: [], receipts_of, gone) == []


@pytest.mark.parametrize(
    ("beat", "now", "down_s", "starting", "state"),
    [
        (None, 10_000, 10.0, None, "unseen"),  # never beaten nor started: no worker ever
        (0, 10_000, 10.0, None, "up"),  # exactly the bound: still up
        (0, 10_001, 10.0, None, "down"),  # past the bound
        (9_000, 10_000, 0.5, None, "down"),
        (11_000, 10_000, 10.0, None, "up"),  # a clock ahead
        # `inbox up` started its worker: starting until its first beat, within the bound
        (None, 10_000, 10.0, 9_000, "starting"),
        (None, 70_000, 10.0, 10_000, "starting"),  # 60 s: the bound
        (None, 70_001, 10.0, 10_000, "down"),  # never beat within the bound
        (1_000, 30_000, 10.0, 25_000, "starting"),  # restarted after its beat stopped
        (29_000, 30_000, 10.0, 25_000, "up"),  # its first beat
        (25_000, 40_000, 10.0, 20_000, "down"),  # it beat after its start, then stopped
    ],
)
def test_beat_state(
    beat: int | None, now: int, down_s: float, starting: int | None, state: str
) -> None:
    assert status_view.beat_state(beat, now, down_s, starting_ms=starting) == state
