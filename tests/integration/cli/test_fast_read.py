"""The read commands' fast lane answers byte for byte as the full command line does.

Each state is built with the library on a real Redis; each command then runs as a real
``inbox`` process on the full path (``INBOX_FAST_READ=0``) and through the lane, in this
process (:func:`bus.lanes.read.answer`, so a test knows the lane answered and did not
hand the command on) and as a process (the console entry, which must print the same bytes
whichever answers). The few names the lane mirrors are held equal to the library's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import pytest

from bus.api import Bus
from bus.core.lane_names import SESSION_STATES
from bus.core.models import SessionInfo
from bus.core.settings import Settings
from bus.lanes import read as fast_read
from bus.telemetry import liveness
from tests.support.pictures import png_bytes

INBOX = Path(sys.executable).parent / "inbox"
# The lane reads one standalone server; on a cluster the full command line answers.
pytestmark = pytest.mark.usefixtures("standalone_store")


def full(env: dict[str, str], argv: list[str]) -> subprocess.CompletedProcess[str]:
    """``inbox ARGV`` on the full command line."""
    return subprocess.run(
        [str(INBOX), *argv],
        env={**env, fast_read.OFF_VAR: "0"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def entry_run(env: dict[str, str], argv: list[str]) -> subprocess.CompletedProcess[str]:
    """``inbox ARGV`` as a user runs it (the lane when it can)."""
    return subprocess.run([str(INBOX), *argv], env=env, capture_output=True, text=True, timeout=120)


class Lane:
    """Runs :func:`fast_read.answer` in this process under a child's ``INBOX_*``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
        self.monkeypatch, self.capsys = monkeypatch, capsys

    def __call__(self, env: dict[str, str], argv: list[str]) -> tuple[int | None, str, str]:
        with self.monkeypatch.context() as m:
            for name in [n for n in os.environ if n.startswith("INBOX_")]:
                m.delenv(name)
            for name, value in env.items():
                if name.startswith("INBOX_"):
                    m.setenv(name, value)
            self.capsys.readouterr()
            code = fast_read.answer(argv)
            out = self.capsys.readouterr()
        return code, out.out, out.err


@pytest.fixture
def lane(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Lane:
    return Lane(monkeypatch, capsys)


@pytest.fixture
def env(settings: Settings) -> dict[str, str]:
    return settings.child_env()


def same(lane: Lane, env: dict[str, str], argv: list[str], *, answered: bool = True) -> Any:
    """The lane answers ``argv`` (or, ``answered=False``, hands it on, printing nothing)
    with the full command line's bytes; its answer's JSON."""
    want = full(env, argv)
    code, out, err = lane(env, argv)
    if not answered:
        assert (code, out, err) == (None, "", ""), argv
        return None
    assert code is not None, f"the lane handed {argv} on: {want.stdout}{want.stderr}"
    assert (err, code) == (want.stderr, want.returncode), argv
    assert without_free_bytes(out) == without_free_bytes(want.stdout), argv
    return json.loads(out)


def without_free_bytes(out: str) -> str:
    """``out`` with status's ``disk.free_bytes`` blanked: the one field that moves between
    two reads (other processes write to the same disk); both reads must still carry it."""
    answer = json.loads(out)
    disk = answer.get("disk") if isinstance(answer, dict) else None
    if isinstance(disk, dict) and "free_bytes" in disk:
        assert isinstance(disk["free_bytes"], int)
        disk["free_bytes"] = "?"
        return json.dumps(answer)
    return out


def send(bus: Bus, frm: str, to: str, text: str, **fields: Any) -> dict[str, Any]:
    host = bus.settings.host
    return bus.send(
        {"from": f"{host}:{frm}", "from_session": frm, "to_id": to, "text": text, **fields}
    )


# -- states ---------------------------------------------------------------------------------


def test_an_empty_bus(lane: Lane, env: dict[str, str]) -> None:
    assert same(lane, env, ["status"])["sessions"] == []
    assert same(lane, env, ["sent", "alice"])["sent"] == []
    for argv in (["threads", "alice"], ["read-inbox", "alice"], ["receipt", "m1", "--by", "a"]):
        same(lane, env, argv, answered=False)  # not found: the full path refuses


def test_threads_messages_and_replies(bus: Bus, lane: Lane, env: dict[str, str]) -> None:
    for sid in ("alice", "bob", "carol"):
        bus.open_session(sid)
    first = send(bus, "bob", "alice", "CI is red on main", **{"class": "blocker"})
    other = send(bus, "bob", "alice", "a look at #42?", pr=42)
    send(bus, "carol", "alice", "fyi: the release notes", **{"class": "fyi", "topic": "rel"})
    bus.deliver_session("alice")
    bus.reply("alice", first["thread"], "on it")  # the thread's second message: a log
    bus.deliver_session("bob")

    rows = same(lane, env, ["threads", "alice"])["threads"]
    assert [r["unread"] for r in rows] and any(r["class"] == "blocker" for r in rows)
    same(lane, env, ["threads", "bob"])
    same(lane, env, ["threads", "carol"])
    assert len(same(lane, env, ["read", "alice", first["thread"]])["messages"]) == 2
    same(lane, env, ["read", "bob", first["thread"]])
    same(lane, env, ["read", "alice", other["thread"]])
    same(lane, env, ["status"])
    same(lane, env, ["sent", "bob"])
    same(lane, env, ["sent", "bob", "--limit=1"])
    same(lane, env, ["sent", "bob", "--state", "stored"])
    same(lane, env, ["sent", "alice"])
    same(lane, env, ["receipt", first["id"], "--by", "bob"])
    same(lane, env, ["receipt", other["id"]], answered=False)  # no caller session
    assert same(lane, {**env, "INBOX_SESSION": "bob"}, ["receipt", other["id"]])["id"]
    # What the full path refuses or writes, the lane hands on.
    for argv in (
        ["receipt", first["id"], "--by", "alice"],  # not the sender
        ["read", "carol", first["thread"]],  # not a party
        ["read", "alice", "thr_nosuch"],
        ["read", "alice", first["thread"], "--mark-read"],
        ["sent", "bob", "--limit", "0"],
        ["sent", "bob", "--state", "lost"],
        ["threads", "nosuch"],
    ):
        same(lane, env, argv, answered=False)


def test_receipts_along_the_way(bus: Bus, lane: Lane, env: dict[str, str]) -> None:
    for sid in ("alice", "bob"):
        bus.open_session(sid)
    noticed = send(bus, "bob", "alice", "the build is red", **{"class": "blocker"})
    read = send(bus, "bob", "alice", "and the docs", topic="docs")
    gone = send(bus, "bob", "alice", "never mind")
    bus.withdraw(gone["id"], "bob")  # before any notice: withdrawn
    bounced = send(bus, "bob", "ghost", "anyone there?")
    bus.deliver_session("alice")
    bus.drain("alice")  # the notice: noticed
    bus.read("alice", read["thread"], mark_read=True)
    bus.turn("alice", "start")
    bus.turn("alice", "end", answer="looked at both")

    states = {r["id"]: r["state"] for r in same(lane, env, ["sent", "bob"])["sent"]}
    assert states[bounced["id"]] == "bounced" and states[gone["id"]] == "withdrawn"
    for msg in (noticed, read, gone, bounced):
        same(lane, env, ["receipt", msg["id"], "--by", "bob"])
    for state in ("bounced", "withdrawn", "read", "answered", "noticed"):
        same(lane, env, ["sent", "bob", "--state", state])
    same(lane, env, ["threads", "alice"])
    same(lane, env, ["read", "alice", read["thread"]])
    same(lane, env, ["status"])


def test_workers_backlogs_and_memory_in_status(bus: Bus, lane: Lane, env: dict[str, str]) -> None:
    bus.open_session("idle-one", wake_cmd="true", parent="hosta:lead")
    bus.open_session("member-one", workspace="acme", starter="dean", agent_inbox=False)
    bus.open_session("busy")
    send(bus, "idle-one", "busy", "one")
    send(bus, "idle-one", "busy", "two")  # never delivered: a backlog of 2
    r, k = bus.store.r, bus.store.k
    later = str(bus.clock.now_ms() + 3_600_000)  # a beat ahead of now: its age reads 0.0
    r.sadd(k.workers, "hosta", "scheduler", "hostb")
    r.hset(k.beat("hosta"), mapping={"pid": "41", "beat": later, "progress": later, "done": "7"})
    r.hset(k.beat("scheduler"), mapping={"pid": "42", "beat": later})
    r.rpush(k.celery_queue(liveness.host_queue("hosta")), "x", "y")
    r.hset(k.host_claim("hosta"), mapping={"floor": "m1\t/srv/home", "pid": "41"})
    r.hset(
        k.host_refused("hosta"),
        mapping={"floor": "m2\t/other", "pid": "9", "at": "5", "holder": "m1\t/srv/home"},
    )
    r.hset(k.memory, mapping={"maxmemory-policy": '{"state": "kept"}', "torn": "{"})
    out = same(lane, env, ["status"])
    assert [s["backlog"] for s in out["sessions"] if s["session"] == "busy"] == [2]
    assert {w["name"] for w in out["workers"]} == {"hosta", "hostb", "scheduler"}


def test_items_with_their_threads(
    bus: Bus, lane: Lane, env: dict[str, str], tmp_path: Path
) -> None:
    bus.member_add("acme", "dean")
    bus.member_add("acme", "luke")
    bus.open_session("coder", workspace="acme", starter="dean")
    bus.open_session("plain")
    assert same(lane, env, ["read-inbox", "plain"]) == {"ok": True, "items": []}
    bus.item_post("coder", "deploy", title="Deploy to prod?", text="the dashboard is green")
    bus.item_post("coder", "docs", title="Docs?")
    bus.item_write("coder", "deploy", member="dean", text="What does it look like?")
    (tmp_path / "shot.png").write_bytes(png_bytes())
    bus.reply_inbox(
        "coder", "deploy", text="Here.", image_paths=[str(tmp_path / "shot.png")], root=tmp_path
    )
    bus.item_write("coder", "docs", member="luke", text="later")
    bus.item_settle("coder", "deploy", member="dean", answer="yes")
    bus.member_remove("acme", "luke")  # his words now read "a former member"
    bus.item_post("coder", "docs", title="Docs, again?")  # a second revision
    items = same(lane, env, ["read-inbox", "coder"])["items"]
    assert {i["key"] for i in items} == {"deploy", "docs"}


@pytest.mark.parametrize(
    ("argv", "extra"),
    [
        (["threads", "--help"], {}),
        (["threads", "alice", "extra"], {}),
        (["threads", "bad id!"], {}),
        (["sent", "alice", "--limit", "many"], {}),
        (["sent", "alice", "-x"], {}),
        (["status"], {"INBOX_REDIS_URL": "redis://127.0.0.1:1/0"}),  # Redis down: exit 3
        (["status"], {"INBOX_STALE_S": "soon"}),  # a bad setting, refused in words
        (["threads", "alice"], {"INBOX_SECRET": "s" * 64}),  # tokens: token_missing
    ],
)
def test_the_unusual_is_answered_by_the_full_path_alike(
    bus: Bus, lane: Lane, env: dict[str, str], argv: list[str], extra: dict[str, str]
) -> None:
    bus.open_session("alice")
    e = {**env, **extra}
    want, got = full(e, argv), entry_run(e, argv)
    assert (got.stdout, got.stderr, got.returncode) == (want.stdout, want.stderr, want.returncode)
    assert want.returncode != 0 or "--help" in argv
    assert lane(e, argv) == (None, "", "")


def test_the_console_entry_prints_what_the_lane_prints(
    bus: Bus, lane: Lane, env: dict[str, str]
) -> None:
    for sid in ("alice", "bob"):
        bus.open_session(sid)
    sent = send(bus, "bob", "alice", "hello")
    bus.deliver_session("alice")
    for argv in (["threads", "alice"], ["sent", "bob"], ["receipt", sent["id"], "--by=bob"]):
        got = entry_run(env, argv)
        assert (got.stdout, got.stderr, got.returncode) == (lane(env, argv)[1], "", 0)


# -- what the lane mirrors ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "parsed"),
    [
        (["status"], ("status", [], {})),
        (["threads", "a"], ("threads", ["a"], {})),
        (["read", "a", "thr_1"], ("read", ["a", "thr_1"], {})),
        (["sent", "a", "--limit", "5", "--state=read"], ("sent", ["a"], {"--limit": "5", "--state": "read"})),
        (["sent", "--limit", "5", "a"], ("sent", ["a"], {"--limit": "5"})),
        (["receipt", "m", "--by", "b"], ("receipt", ["m"], {"--by": "b"})),
        (["read-inbox", "a"], ("read-inbox", ["a"], {})),
        (["status", "x"], None),
        (["status", "--help"], None),
        (["threads"], None),
        (["read", "a", "t", "--mark-read"], None),
        (["receipt", "m", "--wait-for", "read"], None),
        (["receipt", "m", "--by"], None),
        (["receipt", "m", "--by", "-b"], None),
        (["sent", "a", "--limit", "1", "--limit", "2"], None),
        (["threads", "--", "a"], None),
        (["threads", "-h"], None),
        (["send", "--to-id", "a"], None),
        ([], None),
    ],
)  # fmt: skip
def test_the_argv_the_lane_takes(argv: list[str], parsed: object) -> None:
    assert fast_read.parse(argv) == parsed


def test_the_session_states_are_the_models() -> None:
    state = SessionInfo.model_fields["state"].annotation
    assert typing.get_args(state) == SESSION_STATES


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"INBOX_HOME": "/srv/in", "INBOX_HOST": "h2", "INBOX_KEY_PREFIX": "p"},
        {"INBOX_HOME": "~/x", "INBOX_SESSION": "me", "INBOX_STALE_S": "60"},
        {"INBOX_REDIS_URL": "redis://127.0.0.1:6379/3", "INBOX_STALE_S": ""},
        {"INBOX_HOME": "/" + "long/" * 30},  # its socket under the temporary folder
    ],
)
def test_the_lane_finds_what_the_settings_find(env: dict[str, str]) -> None:
    place, settings = fast_read.Place.of(env), Settings.from_env(env)
    assert place is not None
    got = (place.home, place.host, place.key_prefix, place.session, place.stale_s)
    assert got == (
        settings.home,
        settings.host,
        settings.key_prefix,
        settings.session,
        settings.stale_s,
    )
    assert place.store_url() == settings.store_url()


@pytest.mark.parametrize(
    "env",
    [
        {"INBOX_SECRET": "x"},
        {"INBOX_REDIS_CLUSTER": "1"},
        {"INBOX_EXPIRE_S": "inf"},
        {"INBOX_MAX_UNREAD": "nan"},
    ],
)
def test_the_lane_hands_on_what_the_settings_read_more_of(env: dict[str, str]) -> None:
    assert fast_read.Place.of(env) is None


@pytest.mark.parametrize(
    "env",
    [
        {"INBOX_HOST_DOWN_S": "0"},
        {"INBOX_HOST_DOWN_S": "-5"},
        {"INBOX_DURABILITY": "fast"},
    ],
)
def test_a_setting_the_library_refuses_is_left_to_the_full_path(env: dict[str, str]) -> None:
    assert fast_read.Place.of(env) is None
    with pytest.raises(ValueError):
        Settings.from_env(env)


def test_a_setting_that_is_not_a_number_is_left_to_the_full_path() -> None:
    with pytest.raises(ValueError):
        fast_read.Place.of({"INBOX_RETRY_S": "soon"})
    with pytest.raises(ValueError):
        Settings.from_env({"INBOX_RETRY_S": "soon"})


@pytest.mark.parametrize(
    ("url", "spoken"),
    [
        ("redis://127.0.0.1:6379/0", True),
        ("redis://:pw@127.0.0.1:6379/2", True),
        ("redis://user:pw@127.0.0.1:6379/0", True),
        ("unix://:pw@/tmp/r.sock", True),
        ("unix:///tmp/r.sock?db=2", True),
        ("redis://user@127.0.0.1:6379/0", False),  # redis-py sends AUTH user ""
        ("redis://127.0.0.1:6379/0?db=1", False),  # redis-py takes the query's db first
        ("redis://127.0.0.1:6379/0?socket_timeout=1", False),
    ],
)
def test_the_urls_the_small_client_speaks_as_redis_py_does(url: str, spoken: bool) -> None:
    assert fast_read.spoken(url) is spoken


def test_a_pipeline_reads_every_reply_before_it_raises_an_error(settings: Settings) -> None:
    from bus.lanes import resp as resp_client

    conn = resp_client.connect(settings.store_url())
    assert isinstance(conn, resp_client.Connection)
    key = f"{settings.key_prefix}:resp-lite"
    try:
        conn.call("SET", key, "1")
        with pytest.raises(resp_client.RespError, match="WRONGTYPE"):
            conn.pipeline([("GET", key), ("HGET", key, "f"), ("GET", key)])
        assert conn.pipeline([("GET", key), ("EXISTS", key)]) == ["1", 1]  # in step still
    finally:
        conn.call("DEL", key)
        conn.close()
