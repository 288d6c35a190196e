"""Every Redis key comes from bus.store.keys, and no atomic step touches two hash slots."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from redis.crc import key_slot

from bus.api import Bus
from bus.core.errors import BadInput
from bus.store.keys import Keys
from bus.store.store import Store


@pytest.mark.parametrize("bad", ["a/b", "..", "", "x" * 181, "a}b", "a{b", "a b"])
def test_a_bad_session_id_never_becomes_a_key(bad: str) -> None:
    with pytest.raises(BadInput):
        Keys("inbox").s(bad, "stream")


def test_a_sessions_keys_share_one_slot_and_a_threads_another() -> None:
    k = Keys("inbox")
    names = ("stream", "ids", "msgs", "new", "wakeq", "notice", "floor", "events", "lock")
    assert len({key_slot(k.s("lane-7", n).encode()) for n in names}) == 1
    assert len({key_slot(k.t("thr_abc234", n).encode()) for n in ("meta", "log", "seen")}) == 1


def test_no_script_touches_two_slots(
    make_bus: Callable[..., Bus], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[tuple[str, list[str]]] = []
    real_script = Store.script

    def recording(self: Store, name: str) -> Any:
        script = real_script(self, name)

        def call(keys: list[str], args: list[Any], client: Any = None) -> Any:
            calls.append((name, keys))
            return script(keys=keys, args=args, client=client)

        call.sha = script.sha  # type: ignore[attr-defined]
        return call

    real_call = Store.script_call

    def recording_call(self: Store, name: str, keys: list[str], args: list[Any]) -> Any:
        calls.append((name, keys))  # a bare EVALSHA for a batch (run_scripts, run_in_order)
        return real_call(self, name, keys, args)

    monkeypatch.setattr(Store, "script", recording)
    monkeypatch.setattr(Store, "script_call", recording_call)
    b = make_bus(wake_debounce_s=0.05)
    for sid in ("alice", "bob"):
        b.open_session(sid)
    b.turn("bob", "start")
    sent = b.send({"from": "hosta:alice", "from_session": "alice", "to_id": "bob", "text": "hi"})
    b.deliver_session("bob")
    b.deliver_session("bob")  # looks at the notice waiting on the floor (floor_sweep)
    b.drain("bob")
    b.turn("bob", "end", answer="ok")
    b.reply("bob", sent["thread"], "thanks")
    b.deliver_session("alice")
    b.withdraw(sent["id"], by="alice")
    req = b.request("bob", "task", "do it", actor="alice")
    b.decide(req["thread"], "accept", actor="bob")
    b.member_add("acme", "dean")
    b.open_session("coder", workspace="acme", starter="dean")
    b.item_post("coder", "k1", title="ok?")
    b.item_write("coder", "k1", member="dean", text="hello")
    b.reply_inbox("coder", "k1", text="hi dean", root=tmp_path)
    time.sleep(0.06)
    b.deliver_session("alice")  # idle, past the debounce: woken (its notice taken alone)
    b.store.schedule.take_due(int(time.time() * 1000))
    names = {name for name, _ in calls}
    assert {
        "append",
        "ingest",
        "thread_append",
        "notice_take",
        "delivery_snapshot",  # a steer's notice taken in it
        "notice_finish",
        "floor_drained",
        "floor_sweep",
        "answer_turn",
        "withdraw",
        "decide",
        "take_due",
    } <= names
    kick = f"{b.store.k.prefix}:{{kick:"
    for name, keys in calls:
        if name == "append" and not b.store.cluster:
            # a standalone server's append may push its delivery kick onto the host's kick
            # list in the same call; on a cluster the store leaves those two keys out
            keys = [key for key in keys if not key.startswith(kick)]
        assert len({key_slot(key.encode()) for key in keys}) == 1, (name, keys)


def test_on_a_cluster_an_append_leaves_the_kick_list_to_the_dispatcher(
    make_bus: Callable[..., Bus], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[list[str]] = []
    real_script = Store.script

    def recording(self: Store, name: str) -> Any:
        script = real_script(self, name)

        def call(keys: list[str], args: list[Any], client: Any = None) -> Any:
            if name == "append":
                seen.append(list(keys))
            return script(keys=keys, args=args, client=client)

        call.sha = script.sha  # type: ignore[attr-defined]
        return call

    monkeypatch.setattr(Store, "script", recording)
    b = make_bus()
    b.open_session("bob")
    store = b.store
    monkeypatch.setattr(store.queue, "cluster", True)  # the queue as it is made on a cluster
    monkeypatch.setattr(
        store, "pipeline", lambda transaction=False: store.r.pipeline(transaction=False)
    )
    store.queue.append("bob", "msg_c1", "{}", "{}", "thr_c1", kick_host="hosta")
    assert seen and not any(key.startswith(f"{store.k.prefix}:{{kick:") for key in seen[-1])
