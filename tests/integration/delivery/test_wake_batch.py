"""Many deliveries at once: due wakes and a batch's receivers dispatched per host in a
few ``inbox.deliver_many`` tasks, run concurrently in a real worker."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from bus.api import Bus
from bus.core.settings import Settings
from bus.delivery.dispatch import request_many
from bus.delivery.scheduler import tick
from tests.support.celery_bus import Scheduler, celery_bus, events
from tests.support.waiting import wait_for
from tests.support.worker_proc import WorkerProcess
from workers.app import make_app
from workers.dispatch import MANY_CHUNK, CeleryDispatcher


class ManyRecorder:
    """A dispatcher that tells single deliveries from many-at-once ones."""

    def __init__(self) -> None:
        self.single: list[tuple[str, str]] = []
        self.many: list[tuple[str, list[str]]] = []

    def request(self, host: str, sid: str) -> None:
        self.single.append((host, sid))

    def request_many(self, host: str, sids: list[str]) -> None:
        self.many.append((host, list(sids)))


class SingleOnly:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def request(self, host: str, sid: str) -> None:
        self.calls.append((host, sid))


class FakeApp:
    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any], str]] = []

    def send_task(self, name: str, kwargs: dict[str, Any], queue: str, **_opts: Any) -> None:
        self.sent.append((name, kwargs, queue))


def idle_with_a_blocker(b: Bus, sid: str, host: str) -> None:
    b.open_session(sid, host=host)
    b.send({"from": "hx:peer", "to_id": sid, "text": "help", "class": "blocker"})
    b.deliver_session(sid)  # plans the debounced wake: a due entry


def test_due_wakes_are_dispatched_per_host_in_one_call_each(
    make_bus: Callable[..., Bus],
) -> None:
    rec = ManyRecorder()
    b = make_bus(dispatcher=rec)
    on_a = [f"a{i}" for i in range(5)]
    on_b = [f"b{i}" for i in range(3)]
    for sid in on_a:
        idle_with_a_blocker(b, sid, "hosta")
    for sid in on_b:
        idle_with_a_blocker(b, sid, "hostb")
    b.store.r.delete(b.store.k.s("a4", "session"))  # a session gone: nothing dispatched
    for sid in on_a + on_b:
        b.store.queue.clear_pending(sid)
    time.sleep(b.settings.wake_debounce_s)  # let the due times pass
    rec.single.clear()
    rec.many.clear()
    out = tick(b.delivery, sweep=False)
    assert out["taken"] == 8 and out["dispatched"] == 7
    assert rec.single == []
    assert sorted((h, sorted(s)) for h, s in rec.many) == [
        ("hosta", on_a[:4]),
        ("hostb", on_b),
    ]
    # Each dispatched session's flag is set, so a send meanwhile does not dispatch again.
    for sid in on_a[:4] + on_b:
        assert b.store.r.exists(b.store.k.s(sid, "pending"))
        assert not b.store.queue.mark_pending(sid)


def test_request_many_falls_back_to_one_request_per_session() -> None:
    single = SingleOnly()
    request_many(single, "h", ["s1", "s2"])
    assert single.calls == [("h", "s1"), ("h", "s2")]


def test_the_celery_dispatcher_sends_chunks_to_the_host_queue() -> None:
    app = FakeApp()
    d = CeleryDispatcher(app)  # type: ignore[arg-type]
    sids = [f"s{i}" for i in range(MANY_CHUNK * 2 + 1)]
    d.request_many("hq", sids)
    assert [name for name, _kw, _q in app.sent] == ["inbox.deliver_many"] * 3
    assert {q for _n, _kw, q in app.sent} == {"host.hq"}
    assert [s for _n, kw, _q in app.sent for s in kw["sids"]] == sids
    app.sent.clear()
    d.request_many("hq", ["only"])  # one session: the ordinary task
    assert app.sent == [("inbox.deliver", {"sid": "only"}, "host.hq")]


def test_a_chunks_task_on_the_broker_names_its_sessions_by_count(settings: Settings) -> None:
    # Celery writes a task's argument reprs into its headers (and sent event); a chunk's
    # says how many sessions, its body carries them all.
    app = make_app(settings)
    sids = [f"s{i}" for i in range(MANY_CHUNK + 1)]
    try:
        CeleryDispatcher(app).request_many("hq", sids)
    finally:
        app.close()
    r = redis.Redis.from_url(settings.celery_broker_url())
    try:
        raws = r.lrange(f"{settings.key_prefix}:celery:host.hq", 0, -1)
    finally:
        r.close()
    sent = sorted((json.loads(raw) for raw in raws), key=lambda m: -len(m["body"]))
    assert [m["headers"]["task"] for m in sent] == ["inbox.deliver_many"] * 2
    assert [m["headers"]["kwargsrepr"] for m in sent] == [
        f"{{'sids': <sessions: {MANY_CHUNK}>}}",
        "{'sids': <sessions: 1>}",
    ]
    assert {m["headers"]["argsrepr"] for m in sent} == {"()"}
    bodies = [json.loads(base64.b64decode(m["body"])) for m in sent]
    assert [s for body in bodies for s in body[1]["sids"]] == sids


def test_a_batch_to_many_receivers_dispatches_per_host_not_per_receiver(
    make_bus: Callable[..., Bus],
) -> None:
    rec = ManyRecorder()
    b = make_bus(dispatcher=rec)
    sids = [f"r{i}" for i in range(6)]
    for sid in sids:
        b.open_session(sid)
        b.turn(sid, "start")
        b.store.queue.clear_pending(sid)
    rec.single.clear()
    b.send_many(
        [{"from": "hx:peer", "to_id": sid, "text": f"m{n}"} for n in range(3) for sid in sids]
    )
    assert rec.single == []
    assert rec.many == [("hosta", sids)]


@pytest.mark.slow
def test_many_idle_sessions_each_wake_once_through_a_real_worker(
    settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    start_worker(settings, concurrency=2)
    b = celery_bus(settings)
    sids = [f"w{i}" for i in range(MANY_CHUNK * 2 + 3)]
    for sid in sids:
        b.open_session(sid)
    b.send_many(
        [{"from": "hx:peer", "to_id": sid, "text": "blocked", "class": "blocker"} for sid in sids]
    )
    sch = Scheduler(settings)
    try:
        wait_for(lambda: all(events(b, sid, "wake") for sid in sids), what="every wake", timeout=30)
        for sid in sids:
            b.send({"from": "hx:peer", "to_id": sid, "text": "more", "class": "blocker"})
        wait_for(
            lambda: all(len(b.floor.peek(sid)) == 2 for sid in sids),
            what="a steer notice each",
            timeout=30,
        )
    finally:
        sch.stop()
    for sid in sids:
        assert len(events(b, sid, "wake")) == 1
        assert b.session(sid).state == "running"
