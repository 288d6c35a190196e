"""A receiver's ``host_state`` in every send's answer: a batch (``send_many``, ``send
--jsonl``) and a waited send say it as a single send does."""

from __future__ import annotations

import json
import subprocess

from bus.api import Bus
from bus.core.models import now_ms
from bus.core.settings import Settings
from tests.support.cli import ENTRY, inbox_as


def inbox(settings: Settings, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return inbox_as(settings, *args, stdin=stdin, module=ENTRY)


def states(answers: list[dict]) -> list[str | None]:  # type: ignore[type-arg]
    return [(a.get("recipient") or {}).get("host_state") for a in answers]


def test_batch_and_waited_sends_answer_the_host_state_as_a_send_does(bus: Bus) -> None:
    bus.open_session("alive", host="hosta")
    bus.open_session("stuck", host="hostb")
    now = now_ms()
    bus.store.schedule.beat("hosta", {"beat": now})
    bus.store.schedule.beat("hostb", {"beat": now - 60_000})  # a minute ago: down
    items = [
        {"id": f"m{i}", "from": "me:sh", "to_id": to, "text": "hi"}
        for i, to in enumerate(["alive", "stuck", "alive", "stuck"])
    ]
    singles = [bus.send({**m, "id": f"one-{m['id']}"}) for m in items]
    assert states(singles) == ["up", "down", "up", "down"]

    batch = bus.send_many(items)
    assert states(batch) == states(singles)
    again = bus.send_many(items)  # resends, still stored: their first answers, read live
    assert all(a["duplicate"] for a in again) and states(again) == states(singles)

    lines = [json.dumps({**m, "id": f"j-{m['id']}"}) for m in items]
    out = inbox(bus.settings, "send", "--jsonl", "-", stdin="\n".join(lines) + "\n")
    assert out.returncode == 0, out.stderr
    assert states([json.loads(x) for x in out.stdout.splitlines()]) == states(singles)

    # A waited send that times out (its message still stored) says why: its host is down.
    waited = bus.send({"from": "me:sh", "to_id": "stuck", "text": "?"}, wait=True, timeout=0.2)
    assert waited["error"] == "timeout" and waited["recipient"]["host_state"] == "down"


def test_a_starting_host_and_one_never_seen_are_not_called_down(bus: Bus) -> None:
    bus.open_session("booting", host="hostc")
    bus.open_session("nobody", host="ghost")  # no worker was ever started for ghost
    bus.store.schedule.mark_starting("hostc")  # as `inbox up` does before it starts the worker

    rows = {r["name"]: r for r in bus.status()["workers"]}
    assert rows["hostc"]["state"] == "starting" and "ghost" not in rows
    assert states([bus.send({"from": "me:sh", "to_id": "booting", "text": "x"})]) == ["starting"]
    assert states([bus.send({"from": "me:sh", "to_id": "nobody", "text": "x"})]) == ["unseen"]
    top = {r["session"]: r["host_state"] for r in bus.watch.top_rows()}
    assert top == {"booting": "starting", "nobody": "unseen"}

    # The command line says nothing of a starting host, and a host never seen in words.
    out = inbox(bus.settings, "send", "--to-id", "booting", "--from", "me:sh", "--text", "x")
    assert out.returncode == 0 and out.stderr == "", out.stderr
    out = inbox(bus.settings, "send", "--to-id", "nobody", "--from", "me:sh", "--text", "x")
    assert out.returncode == 0 and "down" not in out.stderr
    assert "no worker has served host ghost yet" in out.stderr

    # The doctor: the starting host is no problem; the one nobody serves is (unserved).
    doctor = json.loads(inbox(bus.settings, "doctor").stdout)
    found = {(p["check"], p.get("session") or p.get("host")) for p in doctor["problems"]}
    assert ("unserved", "nobody") in found
    assert not {f for f in found if "hostc" in str(f) or f[1] == "booting"}, found

    # Its first beat: up.
    bus.store.schedule.beat("hostc", {"beat": now_ms()})
    assert states([bus.send({"from": "me:sh", "to_id": "booting", "text": "x"})]) == ["up"]


def test_the_upgrade_deletes_the_shared_scheduler_row_and_status_leaves_a_stale_one_out(
    bus: Bus,
) -> None:
    from bus.ops import upgrade
    from bus.store import data_version as dv

    bus.open_session("s")  # data in the store: with no P:data, it is 0.1.0's (version 1)
    bus.store.r.delete(bus.store.k.data)
    # 0.1.0's schedulers all beat under one name; this one stopped an hour ago.
    bus.store.schedule.beat("scheduler", {"beat": now_ms() - 3_600_000, "pid": 1})
    bus.store.schedule.beat("scheduler.hosta", {"beat": now_ms(), "pid": 2})
    said: list[str] = []
    report = upgrade.upgrade(bus.store, "hosta", said.append)
    assert report["was"] == 1 and report["version"] == dv.DATA_VERSION
    assert any("shared scheduler heartbeat of 0.1.0 deleted" in line for line in said), said
    assert not bus.store.r.exists(bus.store.k.beat("scheduler"))
    rows = {r["name"]: r for r in json.loads(inbox(bus.settings, "status").stdout)["workers"]}
    assert "scheduler" not in rows and rows["scheduler.hosta"]["state"] == "up"

    # A 0.1.0 scheduler still running on a host not yet upgraded writes it again: shown
    # while it beats, left out once it stops (never down forever).
    bus.store.schedule.beat("scheduler", {"beat": now_ms(), "pid": 1})
    assert {r["name"] for r in bus.status()["workers"]} >= {"scheduler"}
    bus.store.schedule.beat("scheduler", {"beat": now_ms() - 60_000})
    assert "scheduler" not in {r["name"] for r in bus.status()["workers"]}
