"""``celery call send`` as an operator uses it: the answer is the task's result, read with
``celery -A workers result``; a refusal is the task's FAILURE carrying the refusal code."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
import redis
from celery import states

from bus.api import Bus
from bus.core.settings import SOURCE_ROOT, Settings, kombu_url
from bus.trust.tokens import SCOPE_READ, SCOPE_WRITE, issue
from tests.support.worker_proc import WorkerProcess
from workers.app import make_app, result_options
from workers.dispatch import CeleryDispatcher
from workers.tasks import SendRefused

pytestmark = pytest.mark.slow


def celery(s: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "celery", "-A", "workers", *args],
        env=s.child_env(),
        cwd=str(SOURCE_ROOT),
        capture_output=True,
        text=True,
        timeout=60,
    )


def call_send(s: Settings, fields: dict[str, Any]) -> str:
    out = celery(s, "call", "send", "--kwargs", json.dumps(fields))
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_send_answer_and_refusals_are_celery_results(
    settings: Settings,
    bus: Bus,
    start_worker: Callable[..., WorkerProcess],
    redis_url: str,
) -> None:
    bus.open_session("demo")
    start_worker(settings, pool="solo")
    app = make_app(settings)

    ok_id = call_send(settings, {"from": "a:me", "to_id": "demo", "text": "hi"})
    answer = app.AsyncResult(ok_id).get(timeout=30)
    assert answer["ok"] is True
    assert answer["id"] and answer["thread"] and answer["state"]

    # The Celery way, from the command line: the same answer.
    shown = celery(settings, "result", ok_id)
    assert shown.returncode == 0, shown.stderr
    assert answer["id"] in shown.stdout and answer["thread"] in shown.stdout

    refusals = {
        "not_found": {"from": "a:me", "to_id": "nobody", "text": "hi"},
        "bad_input": {"from": "a:me", "to_id": "demo", "text": "hi", "class": "shout"},
        # The suite's store has no replica: a replica level is not met (in 2 s).
        "not_durable": {"from": "a:me", "to_id": "demo", "text": "hi", "durability": "replica"},
    }
    for code, fields in refusals.items():
        task_id = call_send(settings, fields)
        result = app.AsyncResult(task_id)
        with pytest.raises(SendRefused) as refused:
            result.get(timeout=30)
        assert result.state == states.FAILURE
        assert refused.value.code == code and refused.value.message
        shown = celery(settings, "result", "--traceback", task_id)
        assert f"SendRefused: {code}: " in shown.stdout, shown.stdout + shown.stderr

    # The results are kept under the bus's prefix, with an expiry.
    client = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(match=f"{settings.key_prefix}:celery:celery-task-meta-*"))
    assert len(keys) == 4
    assert all(0 < client.ttl(k) <= settings.send_result_expires_s for k in keys)
    client.close()


@pytest.mark.parametrize(
    ("url", "broker"),
    [
        ("unix:///run/inbox/redis.sock", "redis+socket:///run/inbox/redis.sock"),
        ("unix://:pw@/run/inbox/redis.sock", "redis+socket://:pw@/run/inbox/redis.sock"),
        ("UNIX:///x.sock", "redis+socket:///x.sock"),
        ("redis://h:6379/0", "redis://h:6379/0"),
        ("redis+socket:///x.sock", "redis+socket:///x.sock"),
        ("sentinel://h:26379", "sentinel://h:26379"),
    ],
)
def test_kombu_url(url: str, broker: str) -> None:
    assert kombu_url(url) == broker
    assert Settings(redis_url=url).celery_broker_url() == broker
    assert Settings(redis_url="redis://other", broker_url=url).celery_broker_url() == broker


class OptionsApp:
    def __init__(self) -> None:
        self.options: list[dict[str, Any]] = []

    def send_task(self, name: str, **options: Any) -> None:
        self.options.append(options)


def test_deliveries_are_sent_without_a_result() -> None:
    # The app has a result backend (for send): a task sent by name with a result would
    # have the dispatching process subscribe for it, a round trip a delivery.
    app = OptionsApp()
    d = CeleryDispatcher(app)  # type: ignore[arg-type]
    d.request("h", "s1")
    d.request_many("h", ["s1", "s2"])
    assert len(app.options) == 2
    assert all(o["ignore_result"] is True for o in app.options)


@pytest.mark.parametrize(
    ("broker", "backend"),
    [
        ("redis+socket:///x.sock", "redis+socket:///x.sock"),
        ("unix:///x.sock", "redis+socket:///x.sock"),
        ("redis://h:6379/0", "redis://h:6379/0"),
        ("amqp://guest@h//", None),
    ],
)
def test_the_result_backend_is_the_brokers_redis(broker: str, backend: str | None) -> None:
    options = result_options(Settings(broker_url=broker, key_prefix="p"))
    assert options.get("result_backend") == backend
    if backend:
        assert options["result_backend_transport_options"] == {"global_keyprefix": "p:celery:"}


def test_the_worker_never_sends_with_the_token_of_the_shell_that_started_it(
    settings: Settings, make_bus: Callable[..., Bus], start_worker: Callable[..., WorkerProcess]
) -> None:
    secret = "s" * 32
    s = replace(settings, secret=secret)
    b = make_bus(secret=secret)
    b.open_session("alice")
    b.open_session("demo")
    alice = issue(secret, session="alice", scopes=[SCOPE_WRITE])
    # The shell that starts the worker acts as alice.
    start_worker(s, pool="solo", INBOX_TOKEN=alice, INBOX_SESSION="alice")
    app = make_app(s)

    bare = app.AsyncResult(call_send(s, {"to_id": "demo", "text": "as whom?"}))
    with pytest.raises(SendRefused) as refused:
        bare.get(timeout=30)
    assert refused.value.code == "token_missing"

    # The caller's own token, among the fields: sent, verified, as its subject.
    sent = app.AsyncResult(call_send(s, {"to_id": "demo", "text": "mine", "token": alice}))
    answer = sent.get(timeout=30)
    assert answer["ok"] is True and answer["state"] == "stored"
    demo = issue(secret, session="demo", scopes=[SCOPE_READ])
    thread = b.read("demo", answer["thread"], token=demo)
    (msg,) = thread["messages"]
    assert msg["fromSession"] == "alice" and msg["verified"] is True
