"""Durable subscriptions (bus.services.durable_watch) and watching lanes: a coordinator killed and
restarted sees every lane message once; a cursor trimmed away is refused plainly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from functools import partial
from typing import Any

import pytest

from bus.api import Bus
from bus.core.settings import SOURCE_ROOT, Settings
from bus.services.durable_watch import CursorExpired, Durable, expired, lanes
from tests.support.waiting import wait_for


def send(b: Bus, to: str, text: str, **kw: Any) -> dict[str, Any]:
    return b.send({"from": "hosta:coord", "to_id": to, "text": text, **kw})


@pytest.mark.parametrize(
    ("cursor", "bounds", "kept", "out"),
    [
        ("5-0", None, False, False),
        ("0-0", {"first": "9-0", "max_deleted": "8-0"}, False, False),
        ("5-0", {"first": "3-0", "max_deleted": "0-0"}, True, False),
        ("5-0", {"first": "9-0", "max_deleted": "8-0"}, False, True),
        ("5-0", {"first": "9-0", "max_deleted": "5-0"}, False, False),
        ("5-0", {"first": "9-0", "max_deleted": "0-0"}, False, True),  # 6.2: no max-deleted
        ("5-0", {"first": "9-0", "max_deleted": "0-0"}, True, False),
    ],
)
def test_when_a_cursor_has_fallen_out_of_retention(
    cursor: str, bounds: dict[str, str] | None, kept: bool, out: bool
) -> None:
    assert expired(cursor, bounds, kept) is out


def take(sub: Durable, n: int, timeout: float = 20) -> list[dict[str, Any]]:
    """The next ``n`` events of ``sub`` (each acknowledged), read on a thread."""
    got: list[dict[str, Any]] = []
    done = threading.Event()

    def run() -> None:
        for event in sub:
            got.append(event)
            sub.ack(event)
            if len(got) >= n:
                done.set()
                return

    t = threading.Thread(target=run, daemon=True)
    t.start()
    assert done.wait(timeout), got
    sub.stop.set()
    t.join(5)
    return got


def test_lanes_are_the_sessions_started_or_given_work(bus: Bus) -> None:
    bus.open_session("coord")
    bus.open_session("lane1", parent="coord")
    bus.open_session("lane2")
    bus.open_session("other")
    bus.store.sessions.add_gave("coord", "lane2")
    assert lanes(bus.store, "coord") == ["lane1", "lane2"]


def test_lanes_are_found_by_the_parent_field_not_whole_records(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A watch of lanes looks them up every few seconds: every session's whole record was
    # most of an idle 1,010-session coordinator's reads.
    bus.open_session("coord")
    bus.open_session("lane1", parent="coord")
    bus.open_session("other", parent="elsewhere")

    def whole_records() -> None:
        raise AssertionError("every session's whole record read")

    monkeypatch.setattr(bus.store.sessions, "sessions", whole_records)
    assert lanes(bus.store, "coord") == ["lane1"]


def test_live_watch_of_lanes_follows_a_lane_started_later(bus: Bus) -> None:
    bus.open_session("coord")
    bus.open_session("lane1", parent="coord")
    bus.open_session("other")
    stop = threading.Event()
    events = bus.watch.subscribe(None, lanes_of=["coord"], block_ms=100, stop=stop, refresh_s=0.1)
    got: list[dict[str, Any]] = []

    def run() -> None:
        for event in events:
            got.append(event)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    send(bus, "other", "not a lane")
    first = send(bus, "lane1", "one")
    bus.open_session("lane2", parent="coord")
    wait_for(lambda: len(got) >= 1, what="lane1's message")
    second = send(bus, "lane2", "two")
    wait_for(lambda: len(got) >= 2, what="lane2's message")
    stop.set()
    t.join(5)
    assert [e["message"]["id"] for e in got] == [first["id"], second["id"]]


def test_a_durable_subscription_resumes_with_nothing_missed_or_repeated(bus: Bus) -> None:
    for sid in ("coord", "l1", "l2"):
        bus.open_session(sid, parent=None if sid == "coord" else "coord")
    send(bus, "l1", "before the subscription")  # not followed: it starts from now
    sub = bus.watch.durable("c1", lanes_of=["coord"], block_ms=100)
    a = [send(bus, "l1", "a1"), send(bus, "l2", "a2")]
    got = take(sub, 2)
    assert sorted(e["message"]["id"] for e in got) == sorted(x["id"] for x in a)
    assert {e["subscription"] for e in got} == {"c1"}
    # Down: messages come meanwhile, a new lane too.
    b = [send(bus, "l1", "b1"), send(bus, "l2", "b2")]
    bus.open_session("l3", parent="coord")
    b.append(send(bus, "l3", "b3"))
    again = bus.watch.durable("c1", lanes_of=["coord"], block_ms=100, refresh_s=0.1)
    got2 = take(again, 3)
    assert sorted(e["message"]["id"] for e in got2) == sorted(x["id"] for x in b)
    assert got2[0]["message"]["text"] in ("b1", "b2", "b3")
    # Nothing more: a third start has nothing waiting but what comes next.
    third = bus.watch.durable("c1", lanes_of=["coord"], block_ms=100)
    c = send(bus, "l2", "c1")
    assert [e["message"]["id"] for e in take(third, 1)] == [c["id"]]


def test_a_durable_subscription_keeps_its_sessions_events_from_the_quiet_drop(bus: Bus) -> None:
    bus.open_session("l1")
    sub = bus.watch.durable("keep", sessions=["l1"], block_ms=100)
    sent = send(bus, "l1", "kept for the subscriber")
    assert bus.store.events.drop_quiet_events(["l1"], 0) == 0  # pinned by the cursor
    assert [e["message"]["id"] for e in take(sub, 1)] == [sent["id"]]


def test_a_cursor_trimmed_away_is_refused_as_cursor_expired(bus: Bus) -> None:
    bus.open_session("l1")
    sub = bus.watch.durable("old", sessions=["l1"], block_ms=100)
    first = send(bus, "l1", "seen")
    take(sub, 1)
    assert first
    key = bus.store.k.s("l1", "events")
    for n in range(5):
        send(bus, "l1", f"later {n}")
    bus.store.r.xtrim(key, maxlen=1, approximate=False)  # retention passed them by
    with pytest.raises(CursorExpired) as err:
        bus.watch.durable("old", sessions=["l1"], block_ms=100)
    assert err.value.code == "cursor_expired"
    assert "fell out of retention for session 'l1'" in str(err.value)
    fresh = bus.watch.durable("old", sessions=["l1"], block_ms=100, reset=True)
    later = send(bus, "l1", "after the reset")
    assert [e["message"]["id"] for e in take(fresh, 1)] == [later["id"]]


def _watch(s: Settings, *args: str) -> subprocess.Popen[str]:
    env = s.child_env()
    env["INBOX_DISPATCHER"] = "none"
    return subprocess.Popen(
        [sys.executable, "-m", "bus.surfaces.cli.app", "watch", *args],
        env=env,
        cwd=str(SOURCE_ROOT),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _lines(proc: subprocess.Popen[str], n: int) -> list[dict[str, Any]]:
    assert proc.stdout is not None
    return [json.loads(proc.stdout.readline()) for _ in range(n)]


def _cursors_at(bus: Bus, last: dict[str, str]) -> bool:
    return bus.store.events.sub_cursors("coordsub", list(last)) == last


def test_inbox_watch_name_killed_and_restarted_sees_every_lane_message_once(
    bus: Bus, settings: Settings
) -> None:
    bus.open_session("coord")
    lanes_ = [f"lane{n}" for n in range(4)]
    for sid in lanes_:
        bus.open_session(sid, parent="coord")
    seen: list[str] = []
    sent: list[str] = []
    missed = 0  # messages sent while it was down, read first when it is back
    for round_ in range(4):
        proc = _watch(settings, "--lanes", "coord", "--name", "coordsub")
        try:
            wait_for(
                lambda: all(bus.store.events.sub_cursors("coordsub", lanes_).values()),
                what="the subscription's cursors",
            )
            events = _lines(proc, missed)
            if round_ < 3:
                sent += [send(bus, sid, f"r{round_} {sid}")["id"] for sid in lanes_]
                events += _lines(proc, len(lanes_))
            seen += [e["message"]["id"] for e in events]
            last = {e["session"]: e["stream_id"] for e in events}
            # Killed between messages (each printed line's cursor written).
            wait_for(partial(_cursors_at, bus, last), what="the cursors of what it printed")
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        missed = 1
        sent.append(send(bus, "lane0", f"r{round_} while it is down")["id"])
    sent.pop()  # the last round's: no restart after it
    assert sorted(seen) == sorted(sent)
    assert len(seen) == len(set(seen)) == 3 * 4 + 3


def test_inbox_watch_refuses_a_mixed_selection(settings: Settings) -> None:
    proc = _watch(settings, "a", "--all")
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "watch needs SID..., --lanes SID or --all" in err


def test_a_reader_follows_itself_and_its_lanes_only(bus: Bus) -> None:
    from bus.core.errors import Refused

    bus.open_session("coord")
    bus.open_session("mine", parent="coord")
    bus.open_session("theirs")
    with pytest.raises(Refused) as err:
        bus.watch.reader_subscription("coord", "s", sessions=["theirs"], lanes=True)
    assert err.value.code == "not_your_lane"
    sub = bus.watch.reader_subscription("coord", "s", sessions=["coord"], lanes=True)
    assert sub.name == "coord/s"  # under its reader: bus.store.keys.Keys.reader_sub
    assert sorted(sub.pos) == ["coord", "mine"]


@pytest.mark.anyio
async def test_the_mcp_watch_tool_resumes_from_what_was_acknowledged(
    settings: Settings, bus: Bus
) -> None:
    from tests.support.mcp_client import call, error_text, mcp_client, ok

    bus.open_session("coord")
    bus.open_session("lane", parent="coord")
    bus.open_session("theirs")
    async with mcp_client(settings, "coord") as client:
        first = ok(await call(client, "watch", wait_s=0.1))  # made: from now on
        assert first["events"] == []
        a = send(bus, "lane", "a")
        got = ok(await call(client, "watch", wait_s=5))
        assert [e["message"]["id"] for e in got["events"]] == [a["id"]]
        # Not acknowledged: the same again; acknowledged: the next one only.
        again = ok(await call(client, "watch", wait_s=5))
        assert [e["message"]["id"] for e in again["events"]] == [a["id"]]
        b = send(bus, "lane", "b")
        nxt = ok(await call(client, "watch", ack=again["ack"], wait_s=5))
        assert [e["message"]["id"] for e in nxt["events"]] == [b["id"]]
        refused = await call(client, "watch", name="x", sessions=["theirs"], wait_s=0.1)
    assert "not_your_lane" in error_text(refused)


def test_the_gateway_streams_a_durable_subscription_as_server_sent_events(
    bus: Bus, settings: Settings
) -> None:
    import http.client

    from tests.support.local_servers import free_port

    bus.open_session("coord")
    bus.open_session("lane", parent="coord")
    port = free_port()
    env = settings.child_env()
    env["INBOX_DISPATCHER"] = "none"
    server = subprocess.Popen(
        [sys.executable, "-m", "bus.surfaces.cli.app", "serve", "--port", str(port)],
        env=env,
        cwd=str(SOURCE_ROOT),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    conns: list[http.client.HTTPConnection] = []

    def stream() -> tuple[http.client.HTTPConnection, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
        conns.append(conn)
        conn.request("GET", "/v1/watch?by=coord&name=sse")
        resp = conn.getresponse()
        assert resp.status == 200, resp.read()
        assert resp.getheader("content-type", "").startswith("text/event-stream")
        assert resp.readline() == b": subscribed\n"
        resp.readline()
        return conn, resp

    def event(resp: Any) -> dict[str, Any]:
        first = resp.readline()
        while first.startswith(b":"):  # a comment (the quiet keep-alive): clients skip it
            assert resp.readline() == b"\n"
            first = resp.readline()
        lines = [first, *(resp.readline() for _ in range(3))]
        assert lines[1] == b"event: message\n" and lines[3] == b"\n"
        data = json.loads(lines[2].removeprefix(b"data: "))
        assert lines[0] == f"id: {data['session']}/{data['stream_id']}\n".encode()
        return data

    try:

        def up() -> bool:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                c.request("GET", "/health")
                return c.getresponse().status == 200
            except OSError:
                return False

        wait_for(up, 60, "the gateway")
        conn, resp = stream()
        a = send(bus, "lane", "a")
        assert event(resp)["message"]["id"] == a["id"]
        wait_for(
            lambda: (
                bus.store.events.sub_cursors("coord/sse", ["lane"])["lane"] is not None
                and bus.store.events.sub_cursors("coord/sse", ["lane"])["lane"] != "0-0"
            ),
            what="the event acknowledged",
        )
        conn.close()
        b = send(bus, "lane", "b")  # while disconnected
        conn, resp = stream()
        assert event(resp)["message"]["id"] == b["id"]  # resumed: a not again
        conn.close()
        bad = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
        bad.request("GET", "/v1/watch?name=sse")
        refused = bad.getresponse()
        assert refused.status == 400 and json.loads(refused.read())["error"] == "no_session"
    finally:
        for c in conns:
            c.close()
        server.terminate()
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(10)
            raise


@pytest.mark.parametrize(("step_s", "comments"), [(0.0, 0), (1.0, 1)])
def test_the_gateway_s_quiet_comment_is_timed_not_counted(
    monkeypatch: pytest.MonkeyPatch, step_s: float, comments: int
) -> None:
    """Reads that return at once with no message (other records) bring no ``: quiet``
    comment before SSE_KEEPALIVE_S has passed on the clock; 20 s of them bring one."""
    import asyncio
    from types import SimpleNamespace

    from bus.services import durable_watch
    from bus.surfaces.http import gateway

    stop = threading.Event()
    clock = [0.0]
    calls = [0]

    def fake_poll(sub: Any, *, max_events: int, wait_ms: int) -> tuple[list[Any], dict[str, str]]:
        calls[0] += 1
        clock[0] += step_s
        if calls[0] >= 20:
            stop.set()
        return [], {}

    monkeypatch.setattr(durable_watch, "poll", fake_poll)
    monkeypatch.setattr(gateway, "time", SimpleNamespace(monotonic=lambda: clock[0]))

    async def collect() -> list[bytes]:
        return [chunk async for chunk in gateway._sse(object(), stop)]

    got = asyncio.run(collect())
    assert got[0] == b": subscribed\n\n"
    assert got[1:] == [b": quiet\n\n"] * comments
