"""Upgrading from the previous release: data written by inbox 0.1.0's own code
(tests/fixtures/release_0_1_0.json, made by tests/fixtures/make_release_data.py) opened by
this release. Sessions, unread messages, receipts, tokens, handles, subscriptions and wake
commands are as before, or said; the data is upgraded once, under a lock, and a kill
half-way is finished by the next run; a host older than the data refuses to start; a host
still on 0.1.0 (its commit's own code) keeps working beside an upgraded one."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bus.api import Bus
from bus.core import wake_consent
from bus.core.errors import BadInput, Refused
from bus.core.settings import Settings
from bus.core.version import __version__
from bus.delivery import kept_wake
from bus.ops import upgrade
from bus.ops.migrations import MIGRATIONS, Migration, Run, split_reader_sub
from bus.store import data_version as dv
from bus.trust.rules import member_fold, skeleton

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "release_0_1_0.json"
INBOX = Path(sys.executable).parent / "inbox"


def load_release(bus: Bus, home: Path) -> dict[str, Any]:
    """Write the 0.1.0 fixture's keys under ``bus``'s prefix and its files under ``home``.

    The recipient index's day buckets (``{rc:<b>}:rcpt:<day>``) are moved to today: the
    data is opened as if 0.1.0 wrote it today, not on the day the fixture was made (a
    receipt is looked up over the last 8 days only)."""
    data = json.loads(FIXTURE.read_text())
    r, prefix = bus.store.r, bus.settings.key_prefix
    today = int(time.time() // 86400)
    for name, entry in data["keys"].items():
        name = re.sub(r"^(\{rc:\d+\}:rcpt:)\d+$", rf"\g<1>{today}", name)
        key, kind, value = f"{prefix}:{name}", entry["type"], entry["value"]
        if kind == "string":
            r.set(key, value)
        elif kind == "hash":
            r.hset(key, mapping=value)
        elif kind == "list":
            r.rpush(key, *value)
        elif kind == "set":
            r.sadd(key, *value)
        elif kind == "zset":
            r.zadd(key, {member: score for member, score in value})
        elif kind == "stream":
            for eid, fields in value:
                r.xadd(key, fields, id=eid)
            if not value:  # emptied by the delivery: the stream stays, at its last id
                r.xadd(key, {"x": "1"}, id="0-1")
                r.xdel(key, "0-1")
    for rel, text in data["files"].items():
        path = home / rel
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        path.write_text(text)
    return data


@pytest.fixture
def old(settings: Settings, make_bus: Any) -> tuple[Bus, dict[str, Any]]:
    data = json.loads(FIXTURE.read_text())
    s = replace(settings, host=data["host"], secret=data["secret"])
    b = make_bus(host=s.host, secret=s.secret)
    return b, load_release(b, s.home)


def reader(bus: Bus, sid: str) -> str:
    return str(bus.issue_token(session=sid, scopes=["agent:inbox:read"])["token"])


def inbox(s: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **s.child_env()}
    return subprocess.run(
        [str(INBOX), *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_the_fixture_was_written_by_the_previous_release() -> None:
    data = json.loads(FIXTURE.read_text())
    assert data["release"] == "0.1.0" and data["made_by"].endswith("make_release_data.py")
    assert "data" not in data["keys"]  # 0.1.0 kept no data version


def test_release_data_opened_by_this_release(old: tuple[Bus, dict[str, Any]]) -> None:
    bus, data = old
    s, facts = bus.settings, data["facts"]
    said: list[str] = []
    report = upgrade.prepare(bus.store, s, said.append)

    # Upgraded once: each migration said what it did, the version stamped.
    assert report["was"] == 1 and report["version"] == dv.DATA_VERSION == 2
    assert [r["migration"] for r in report["ran"]] == [m.name for m in MIGRATIONS]
    assert dv.read(bus.store)["release"] == __version__
    text = "\n".join(said)
    assert "1 handle(s) indexed for look-alikes (cafe)" in text
    assert "1 member name(s) indexed against look-alike handles (acme/dean)" in text
    assert "1 reader subscription(s) renamed, cursors kept (alpha.feed -> alpha/feed)" in text

    # Handles: the look-alike index holds cafe's (Cyrillic, reads as xa:ape): the plain
    # xa:ape is refused while cafe holds it.
    cyrillic = "\u0445\u0430:\u0430\u0440\u0435"
    assert bus.store.r.hkeys(bus.store.k.skeleton_map(skeleton(cyrillic))) == ["cafe"]
    with pytest.raises(BadInput) as refused:
        bus.open_session("copy", handle="xa:ape")
    assert refused.value.code == "handle_lookalike"
    assert bus.store.members.member_by_fold(member_fold("acme", "dean")) == "acme/dean"

    # Subscriptions: the reader's goes on from its cursors under its new name.
    assert bus.store.events.sub_cursors("alpha/feed", ["waker", "lane"]) == {
        sid: data["keys"][f"{{{sid}}}:subs"]["value"]["alpha.feed"] for sid in ("waker", "lane")
    }
    assert not bus.store.r.exists(bus.store.k.sub("alpha.feed"))
    assert bus.store.r.zrange(bus.store.k.reader_subs("alpha"), 0, -1) == ["feed"]

    # Sessions, handles, unread messages, receipts and tokens as 0.1.0 left them.
    assert bus.session("cafe").handle == cyrillic
    assert bus.session("lane").workspace == "acme" and bus.session("lane").parent == "alpha"
    token = facts["token"]
    for sid in facts["messages"]:
        threads = bus.threads(sid, token=reader(bus, sid))["threads"]
        assert len(threads) == 1 and threads[0]["unread"] == 1, threads
    receipt = bus.receipt(facts["messages"]["waker"], token=token)
    assert receipt["state"] == "stored", receipt
    with pytest.raises(Exception, match="revoked"):
        bus.receipt(facts["messages"]["alpha"], token=facts["revoked"])

    # The wake command 0.1.0 kept in Redis only: named with the command, off until kept.
    assert [c["session"] for c in report["wake_consent"]] == ["waker"]
    fix = report["wake_consent"][0]["fix"]
    assert fix == "inbox session open waker --wake-cmd 'touch woke-by-record'"
    assert any(line.strip() == f"waker: {fix}" for line in said)
    status = json.loads(inbox(s, "status").stdout)
    rows = {row["session"]: row for row in status["sessions"]}
    assert rows["waker"]["wake"]["state"] == "off" and "wake" not in rows["alpha"]
    assert status["version"] == __version__
    doctor = inbox(s, "doctor")
    assert doctor.returncode == 1 and json.loads(doctor.stdout)["error"] == "wake_consent"
    assert "waker" in doctor.stdout and "inbox session open waker" in doctor.stdout

    # Run again: nothing is migrated twice, the consent is named again.
    again: list[str] = []
    assert upgrade.prepare(bus.store, s, again.append)["ran"] == []
    assert not any("upgrade:" in line for line in again) and any("waker" in x for x in again)

    # The person runs the command named: the wake command is kept; doctor is content.
    done = inbox(s, *shlex.split(fix)[1:])
    assert done.returncode == 0, done.stderr
    assert kept_wake.kept(bus.delivery.floor, "waker") == "touch woke-by-record"
    assert upgrade.wake_consents(bus.store, s) == []
    assert inbox(s, "doctor", "waker").returncode == 0
    rest = json.loads(inbox(s, "doctor").stdout)  # the host has no worker: other problems
    assert not [p for p in rest.get("problems", []) if p["check"] == "wake_consent"]
    assert (
        "wake"
        not in {r["session"]: r for r in json.loads(inbox(s, "status").stdout)["sessions"]}["waker"]
    )


@pytest.mark.slow
def test_inbox_up_says_what_it_upgraded_and_names_the_wake_commands(
    old: tuple[Bus, dict[str, Any]],
) -> None:
    bus, _ = old
    env = {**os.environ, **bus.settings.child_env()}
    env.update(INBOX_WORKER_STANDBY="0", INBOX_SCHEDULER_STANDBY="0")
    up = subprocess.Popen(
        [str(INBOX), "up"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines: list[str] = []
    try:
        assert up.stdout is not None
        timer = threading.Timer(90, up.kill)  # bounds the read below
        timer.start()
        for line in up.stdout:
            lines.append(line.rstrip("\n"))
            if line.strip().startswith("waker: "):
                break
        timer.cancel()
    finally:
        up.terminate()
        up.wait(60)
    text = "\n".join(lines)
    assert text.count("inbox upgrade: ") == len(MIGRATIONS), text
    assert "reader subscriptions: 1 reader subscription(s) renamed" in text
    assert "1 session(s) of this host are not woken by their wake command" in text
    assert lines[-1].strip() == "waker: inbox session open waker --wake-cmd 'touch woke-by-record'"
    assert dv.version_of(dv.read(bus.store)) == dv.DATA_VERSION


def test_each_host_says_the_release_it_runs(settings: Settings, bus: Bus) -> None:
    from bus.telemetry.liveness import Heartbeat
    from workers.app import make_app

    Heartbeat(bus, settings.host).beat(started=True)
    rows = {row["name"]: row for row in bus.status()["workers"]}
    assert rows[settings.host]["version"] == __version__
    conf = make_app(settings).conf.table(with_defaults=False)  # Flower's worker Config tab
    assert conf["inbox_version"] == __version__
    assert conf["inbox_data_version"] == dv.DATA_VERSION
    version = inbox(settings, "--version")
    assert version.returncode == 0 and version.stdout == f"inbox {__version__}\n"


@pytest.mark.slow
def test_a_worker_started_alone_names_the_wake_commands_and_works_with_older_data(
    old: tuple[Bus, dict[str, Any]], start_worker: Any
) -> None:
    bus, _ = old  # not upgraded: a worker of this release on 0.1.0's data
    worker = start_worker(bus.settings)
    log = "".join(worker.log)
    assert "inbox worker: 1 session(s) of this host are not woken by their wake command" in log
    assert "waker: inbox session open waker --wake-cmd 'touch woke-by-record'" in log
    assert worker.proc.poll() is None


@pytest.mark.slow
def test_a_worker_older_than_the_data_exits_7(settings: Settings, bus: Bus) -> None:
    dv.stamp(bus.store, dv.DATA_VERSION + 1, "9.9.0", "newer", 0)
    ran = subprocess.run(
        [sys.executable, "-m", "bus.surfaces.cli.app", "worker", "--concurrency", "1"],
        env=settings.child_env(),
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert ran.returncode == upgrade.EXIT_DATA_TOO_NEW == 7, ran.stdout + ran.stderr
    assert "upgrade this host to inbox 9.9.0 or later" in ran.stderr


def test_a_migration_killed_half_way_is_finished_by_the_next_run(bus: Bus) -> None:
    bus.open_session("ab")
    done: list[str] = []

    def first(run: Run) -> str:
        done.append("first")
        return "first done"

    def killed(run: Run) -> str:
        raise KeyboardInterrupt  # the process killed in the middle of the step

    steps = (Migration(2, "first", first), Migration(2, "second", killed))
    with pytest.raises(KeyboardInterrupt):
        upgrade.upgrade(bus.store, "h", done.append, migrations=steps)
    assert dv.version_of(dv.read(bus.store)) is None  # not stamped: the step runs again
    assert dv.take_lock(bus.store) is not None  # the lock was let go (here, by finally)
    bus.store.r.delete(bus.store.k.data_lock)
    steps = (Migration(2, "first", first), Migration(2, "second", lambda run: "second done"))
    said: list[str] = []
    report = upgrade.upgrade(bus.store, "h", said.append, migrations=steps)
    assert report["version"] == 2 and said == [
        "inbox upgrade: first: first done",
        "inbox upgrade: second: second done",
    ]
    assert upgrade.upgrade(bus.store, "h", said.append, migrations=steps)["ran"] == []


@pytest.mark.slow
def test_an_upgrade_killed_half_way_is_finished_by_the_next(
    old: tuple[Bus, dict[str, Any]],
) -> None:
    bus, data = old
    s = bus.settings
    env = {**os.environ, **s.child_env(), "INBOX_FAULT": "upgrade:after_cursors"}
    killed = subprocess.run(
        [str(INBOX), "upgrade"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert killed.returncode == -9, killed.stderr  # SIGKILLed inside the last migration
    assert dv.version_of(dv.read(bus.store)) is None  # its step not stamped
    assert bus.store.r.exists(bus.store.k.sub("alpha.feed"))  # the old record not yet dropped
    # The killed host's lock lapses with its TTL; here it is let lapse now.
    bus.store.r.pexpire(bus.store.k.data_lock, 1)
    again = inbox(s, "upgrade")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["version"] == dv.DATA_VERSION
    assert not bus.store.r.exists(bus.store.k.sub("alpha.feed"))
    cursors = data["keys"]["{waker}:subs"]["value"]["alpha.feed"]
    assert bus.store.events.sub_cursors("alpha/feed", ["waker"]) == {"waker": cursors}


def test_one_host_upgrades_while_the_others_wait(bus: Bus) -> None:
    bus.open_session("ab")
    held = dv.take_lock(bus.store)
    assert held is not None
    with pytest.raises(Refused) as busy:
        upgrade.upgrade(bus.store, "h", print, wait_s=0.3)
    assert busy.value.code == "upgrade_busy"
    said: list[str] = []
    started = threading.Event()

    def other_host() -> None:
        started.set()
        upgrade.upgrade(bus.store, "h2", said.append, wait_s=30)

    t = threading.Thread(target=other_host)
    t.start()
    started.wait(5)
    dv.stamp(bus.store, dv.DATA_VERSION, __version__, "h", 0)  # the holder finished
    dv.release_lock(bus.store, held)
    t.join(30)
    assert not t.is_alive()  # it found the work done: it said it waited, and nothing else
    assert len(said) == 1 and "another host is upgrading" in said[0]


def test_a_new_store_is_stamped_without_migrating(bus: Bus) -> None:
    said: list[str] = []
    report = upgrade.upgrade(bus.store, "h", said.append)
    assert report["was"] is None and report["ran"] == [] and said == []
    assert dv.version_of(dv.read(bus.store)) == dv.DATA_VERSION


def test_a_host_older_than_the_data_refuses_to_start(settings: Settings, bus: Bus) -> None:
    dv.stamp(bus.store, dv.DATA_VERSION + 1, "9.9.0", "newer", 0)
    up = subprocess.run(
        [str(INBOX), "up"],
        env={**os.environ, **settings.child_env()},
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert up.returncode == 1, up.stdout + up.stderr
    assert json.loads(up.stdout.splitlines()[-1])["error"] == "data_too_new"
    assert "upgrade this host to inbox 9.9.0 or later" in up.stderr
    assert not bus.store.r.exists(bus.store.k.beat(settings.host))  # no worker ran
    refused = inbox(settings, "upgrade")
    assert refused.returncode == 1 and "9.9.0" in refused.stderr


def test_this_release_delivers_into_data_not_yet_upgraded(
    old: tuple[Bus, dict[str, Any]],
) -> None:
    """A rolling upgrade: a host on this release serves sessions 0.1.0 wrote before any
    host ran the migrations, and the migration then loses nothing sent meanwhile."""
    bus, data = old
    token, op = data["facts"]["token"], reader(bus, "waker")
    sent = bus.send({"to_id": "waker", "text": "still there?"}, token=token)
    bus.deliver_session("waker")
    assert bus.threads("waker", token=op)["threads"][0]["unread"] == 2
    upgrade.upgrade(bus.store, bus.settings.host, lambda line: None)
    assert bus.receipt(sent["id"], token=token)["state"] == "stored"
    assert bus.threads("waker", token=op)["threads"][0]["unread"] == 2


@pytest.mark.parametrize(
    ("name", "sessions", "split"),
    [
        ("alpha.feed", {"alpha"}, ("alpha", "feed")),
        ("a.b.feed", {"a.b"}, ("a.b", "feed")),
        ("a.b.feed", {"a"}, ("a", "b.feed")),
        ("nightly", {"nightly"}, None),  # a plain durable subscription
        ("ops.nightly", set(), None),  # no such reader: left as it is
        ("alpha/feed", {"alpha"}, None),  # already 0.2.0's
    ],
)
def test_split_reader_sub(name: str, sessions: set[str], split: tuple[str, str] | None) -> None:
    assert split_reader_sub(name, sessions.__contains__) == split


@pytest.mark.parametrize(
    ("row", "fix"),
    [
        (
            {"session": "w", "host": "h", "wake_cmd": "run it"},
            "inbox session open w --wake-cmd 'run it'",
        ),
        (
            {
                "session": "w",
                "host": "h",
                "handle": "h:x",
                "parent": "p",
                "agent_inbox": False,
                "wake_cmd": "c",
            },
            "inbox session open w --handle h:x --parent p --no-agent-inbox --wake-cmd c",
        ),
        (
            {"session": "w", "host": "h", "handle": "h:w", "wake_cmd": "c;rm"},
            "inbox session open w --wake-cmd 'c;rm'",
        ),
    ],
)
def test_the_fix_opens_the_session_again_as_its_record_says(row: dict[str, Any], fix: str) -> None:
    assert wake_consent.fix(row) == fix


def test_the_kept_file_name_is_the_delivery_s() -> None:
    assert wake_consent.WAKE_FILE == kept_wake.WAKE_FILE


@pytest.mark.parametrize(
    ("stored", "ours", "refused"), [(None, 2, False), (1, 2, False), (2, 2, False), (3, 2, True)]
)
def test_too_new(stored: int | None, ours: int, refused: bool) -> None:
    assert dv.too_new(stored, ours) is refused


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_mcp_server_says_its_version(settings: Settings, anyio_backend: str) -> None:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    env = {**settings.child_env(), "INBOX_SESSION": "mcp-v", "INBOX_DISPATCHER": "none"}
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "bus.surfaces.cli.app", "mcp"], env=env
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
        init = await client.initialize()
    assert init.server_info.name == "inbox" and init.server_info.version == __version__


# -- a rolling upgrade: a host still on 0.1.0 beside one on this release -----------------------

RELEASE_0_1_0 = "db915a6"
REPO_ROOT = Path(__file__).resolve().parents[3]
OLD_HOST = """
import json, os, sys
from bus.api import connect
from bus.core.settings import Settings
b = connect(Settings.from_env())
facts = json.loads(sys.argv[1])
out = {"bus": __import__("bus").__file__}
sent = b.send({"to_id": "cafe", "text": "from the 0.1.0 host"}, token=facts["token"])
b.deliver_session("cafe")
out["sent"] = sent["id"]
out["receipt"] = b.receipt(sent["id"], token=facts["token"])["state"]
waker = b.issue_token(session="waker", scopes=["agent:inbox:read"])["token"]
out["waker_unread"] = [t["unread"] for t in b.threads("waker", token=waker)["threads"]]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def release_code(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """0.1.0's own code (its commit's ``bus/`` and ``workers/``), run with this
    environment's packages (0.1.0 needs none they lack)."""
    found = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "cat-file", "-e", f"{RELEASE_0_1_0}^{{commit}}"],
        capture_output=True,
        check=False,
    )
    if found.returncode:
        pytest.skip(f"0.1.0's commit {RELEASE_0_1_0} is not in this checkout's history")
    dest = tmp_path_factory.mktemp("release-0.1.0")
    tree = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "archive", RELEASE_0_1_0, "bus", "workers"],
        capture_output=True,
        check=True,
    )
    subprocess.run(["tar", "-x", "-C", str(dest)], input=tree.stdout, check=True)
    return dest


@pytest.mark.slow
def test_a_0_1_0_host_keeps_working_beside_an_upgraded_one(
    old: tuple[Bus, dict[str, Any]], release_code: Path
) -> None:
    bus, data = old
    facts = data["facts"]
    upgrade.prepare(bus.store, bus.settings, lambda line: None)  # the first host moved on
    sent = bus.send({"to_id": "waker", "text": "from the 0.2.0 host"}, token=facts["token"])
    bus.deliver_session("waker")

    env = {**os.environ, **bus.settings.child_env()}
    env.update(PYTHONPATH=str(release_code), INBOX_DISPATCHER="none")
    ran = subprocess.run(
        [sys.executable, "-c", OLD_HOST, json.dumps(facts)],
        env=env,
        cwd=release_code,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    seen = json.loads(ran.stdout.splitlines()[-1])
    assert seen["bus"].startswith(str(release_code))  # 0.1.0's code ran
    # 0.1.0 reads what this release wrote after the upgrade, and writes what it reads.
    assert seen["waker_unread"] == [2] and seen["receipt"] == "stored"
    cafe = bus.threads("cafe", token=reader(bus, "cafe"))["threads"]
    assert [t["unread"] for t in cafe] == [1]
    assert bus.receipt(seen["sent"], token=facts["token"])["state"] == "stored"
    assert bus.receipt(sent["id"], token=facts["token"])["state"] == "stored"
