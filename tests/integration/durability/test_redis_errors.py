"""A Redis that does not answer is one error, Unavailable, raised by the facade."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from bus.api import Bus
from bus.core.errors import BusError, Unavailable
from bus.delivery.drain_marks import outage_words
from bus.store.cluster_reach import ClusterUnreachable
from bus.store.redis_errors import NOT_ANSWERING, down_message, translated, unavailable
from bus.surfaces.http.gateway import create_app
from tests.support.gateway_server import Server, wire


def test_a_bus_call_with_redis_down_raises_unavailable(make_bus: Callable[..., Bus]) -> None:
    dead = make_bus(redis_url="redis://127.0.0.1:1/0")
    with pytest.raises(Unavailable) as caught:
        dead.send({"from": "hosta:me", "to_id": "s1", "text": "hi"})
    err = caught.value
    assert err.code == "unavailable" and err.exit_code == 3
    assert "Redis did not answer" in str(err)
    assert isinstance(err.__cause__, NOT_ANSWERING)
    assert isinstance(err, redis.ConnectionError)  # still caught as Redis's own error
    with pytest.raises(Unavailable):
        dead.status()


def test_a_redis_that_answers_with_an_error_is_not_unavailable() -> None:
    def wrong_type() -> None:
        raise redis.ResponseError("WRONGTYPE Operation against a key holding the wrong kind")

    with pytest.raises(redis.ResponseError):
        translated(wrong_type)()


def test_a_cluster_without_a_reachable_node_is_unavailable() -> None:
    from redis.exceptions import RedisClusterException

    def no_node() -> None:
        raise RedisClusterException("Redis Cluster cannot be connected")

    with pytest.raises(Unavailable):
        translated(no_node)()


def test_refusals_pass_through_unchanged(bus: Bus) -> None:
    with pytest.raises(BusError) as caught:
        bus.session("nobody")
    assert not isinstance(caught.value, Unavailable)


def test_prox_send_with_a_token_and_redis_down_is_503(make_bus: Callable[..., Bus]) -> None:
    from bus.trust.tokens import SCOPE_WRITE, issue

    secret = "http-secret-0123456789"
    dead = make_bus(secret=secret, redis_url="redis://127.0.0.1:1/0")
    token = issue(secret, session="alice", scopes=[SCOPE_WRITE])
    gw = Server(create_app(dead))
    try:
        r = gw.client.post(
            "/send",
            json=wire(**{"from": "neo:alice"}),
            headers={"Authorization": f"Bearer {token}"},
        )
    finally:
        gw.stop()
    assert r.status_code == 503 and r.json()["ok"] is False
    assert not (dead.settings.home / "inbox" / "s1").exists()


def _caused(exc: BaseException, cause: BaseException) -> BaseException:
    exc.__cause__ = cause
    return exc


@pytest.mark.parametrize(
    ("exc", "words"),
    [
        (redis.ConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused."),
         "Redis did not answer at 127.0.0.1:1 (connection refused)"),
        # No node of a cluster answered: the last node's own words, not redis-py's.
        (_caused(ClusterUnreachable("Redis Cluster cannot be connected. Please provide at "
                                    "least one reachable node: Error 111 connecting to "
                                    "127.0.0.1:1. Connection refused."),
                 redis.ConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused.")),
         "Redis did not answer at 127.0.0.1:1 (connection refused)"),
        # Said already (a nested call's refusal): the same words, never wrapped twice.
        (unavailable(redis.ConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused.")),
         "Redis did not answer at 127.0.0.1:1 (connection refused)"),
        (redis.TimeoutError("Timeout reading from socket"), "Redis did not answer (no answer in time)"),
    ],
)  # fmt: skip
def test_what_a_redis_that_did_not_answer_is_called(exc: BaseException, words: str) -> None:
    assert down_message(exc) == (words, "no_answer")
    assert outage_words(exc) == words
