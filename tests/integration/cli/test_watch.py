"""The coordinator's views on a real Redis: live subscribe, run_watch, top rows and table."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

from rich.table import Table

from bus.api import Bus
from bus.services.watch import render_top


def send(b: Bus, to: str, text: str) -> dict[str, Any]:
    return b.send({"from": "hosta:coord", "to_id": to, "text": text})


class Collector:
    """Consumes a subscription on a thread; ``done`` is set once ``want`` events arrived."""

    def __init__(self, events: Iterator[dict[str, Any]], want: Callable[[list], bool]) -> None:
        self.got: list[dict[str, Any]] = []
        self.done = threading.Event()
        self._want = want
        self.thread = threading.Thread(target=self._run, args=(events,), daemon=True)
        self.thread.start()

    def _run(self, events: Iterator[dict[str, Any]]) -> None:
        for event in events:
            self.got.append(event)
            if self._want(self.got):
                self.done.set()


def test_subscriber_started_before_sends_gets_them_in_order(bus: Bus) -> None:
    bus.open_session("a")
    bus.open_session("b")
    old = send(bus, "a", "before the subscriber")
    stop = threading.Event()
    events = bus.watch.subscribe(["a", "b"], block_ms=100, stop=stop)
    col = Collector(events, lambda got: len(got) >= 3)
    sent = [send(bus, "a", "a1"), send(bus, "b", "b1"), send(bus, "a", "a2")]
    assert col.done.wait(10), col.got
    stop.set()
    col.thread.join(5)
    assert not col.thread.is_alive()
    assert old["id"] not in [e["message"]["id"] for e in col.got]
    per = {s: [e["message"]["text"] for e in col.got if e["session"] == s] for s in "ab"}
    assert per == {"a": ["a1", "a2"], "b": ["b1"]}
    assert {e["message"]["id"] for e in col.got} == {x["id"] for x in sent}
    ids_a = [e["stream_id"] for e in col.got if e["session"] == "a"]
    assert ids_a == sorted(ids_a, key=lambda x: tuple(map(int, x.split("-"))))


def test_since_zero_replays_what_is_still_in_the_stream(bus: Bus) -> None:
    bus.open_session("a")
    old = send(bus, "a", "old")
    stop = threading.Event()
    col = Collector(bus.watch.subscribe(["a"], since="0-0", block_ms=100, stop=stop), bool)
    assert col.done.wait(10)
    stop.set()
    col.thread.join(5)
    assert col.got[0]["message"]["id"] == old["id"]


def test_all_picks_up_a_session_opened_later(bus: Bus) -> None:
    bus.open_session("early")
    stop = threading.Event()
    events = bus.watch.subscribe(None, block_ms=50, refresh_s=0.05, stop=stop)
    col = Collector(events, lambda got: {e["session"] for e in got} >= {"early", "late"})
    send(bus, "early", "one")
    bus.open_session("late")
    late = send(bus, "late", "from the start")
    assert col.done.wait(10), col.got
    stop.set()
    col.thread.join(5)
    assert [e["message"]["id"] for e in col.got if e["session"] == "late"] == [late["id"]]


def test_run_watch_prints_one_json_line_per_message(bus: Bus) -> None:
    bus.open_session("a")
    stop = threading.Event()
    printed = threading.Event()

    class Out(io.StringIO):
        def flush(self) -> None:
            if len(self.getvalue().splitlines()) >= 2:
                printed.set()

    out = Out()
    # The stream is empty, so "0-0" sees exactly what "$" would, without racing the thread.
    t = threading.Thread(
        target=bus.watch.run_watch, args=(["a"], out), kwargs={"stop": stop, "since": "0-0"}
    )
    t.start()
    try:
        send(bus, "a", "x")
        send(bus, "a", "y")
        assert printed.wait(10)
    finally:
        stop.set()
        t.join(5)
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    assert [x["message"]["text"] for x in lines] == ["x", "y"]
    assert all(x["session"] == "a" for x in lines)


def test_top_rows_show_backlog_and_unread(bus: Bus) -> None:
    bus.open_session("coord", handle="hosta:coord")
    bus.turn("coord", "start")
    bus.open_session("quiet")
    for n in range(3):
        send(bus, "coord", f"delivered {n}")
    bus.deliver_session("coord")
    send(bus, "coord", "queued 1")
    send(bus, "coord", "queued 2")
    rows = {r["session"]: r for r in bus.watch.top_rows()}
    assert set(rows) == {"coord", "quiet"}
    coord = rows["coord"]
    assert coord["handle"] == "hosta:coord"
    assert coord["host"] == "hosta"
    assert coord["state"] == "running"
    assert coord["turns"] == 1
    assert coord["unread"] == 3
    assert coord["backlog"] == 2
    assert isinstance(coord["age_s"], int) and coord["age_s"] >= 0
    assert rows["quiet"]["unread"] == rows["quiet"]["backlog"] == 0
    bus.read("coord", bus.threads("coord")["threads"][0]["threadId"], mark_read=True)
    assert {r["session"]: r for r in bus.watch.top_rows()}["coord"]["unread"] == 0


def test_render_top_has_one_row_per_session(bus: Bus) -> None:
    for sid in ("s1", "s2", "s3"):
        bus.open_session(sid)
    send(bus, "s2", "waiting")
    rows = bus.watch.top_rows()
    table = render_top(rows)
    assert isinstance(table, Table)
    assert table.row_count == 3
    assert [c.header for c in table.columns][:4] == ["session", "handle", "host", "state"]
    assert render_top([]).row_count == 0
