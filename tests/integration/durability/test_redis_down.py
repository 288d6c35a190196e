"""A Redis that cannot be used, as a user meets it: one message in words, a wrong password
told apart from no server, and a command that gives up at once instead of retrying."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from bus.core.settings import Settings
from bus.ops.embedded import EmbeddedRedis
from bus.store.connection import redis_client
from bus.store.redis_errors import down_message
from tests.support.cli import inbox
from tests.support.local_servers import free_port


def bare_env(home: Path, **extra: str) -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("INBOX_")}
    env.update({"INBOX_HOME": str(home), "INBOX_HOST": "hosta", **extra})
    return env


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    """An embedded server on TCP: it requires its generated password."""
    d = tmp_path_factory.mktemp("guarded")
    with EmbeddedRedis(d / "redis.sock", d / "data", port=free_port(), persist=False) as server:
        yield server


@pytest.mark.parametrize("command", [["threads", "demo"], ["status"], ["read-inbox", "demo"]])
def test_no_server_is_said_once_in_words(tmp_path: Path, command: list[str]) -> None:
    out = inbox(bare_env(tmp_path), *command)
    assert out.returncode == 3
    answer = json.loads(out.stdout)
    assert answer["error"] == "unavailable" and answer["reason"] == "no_answer"
    sock = tmp_path / "redis" / "redis.sock"
    assert answer["message"] == (
        f"Redis did not answer at {sock} (no such file or directory); "
        "is `inbox up` running for this INBOX_HOME, or INBOX_REDIS_URL set to the store "
        "(a home that joined another machine's store keeps it in $INBOX_HOME/store.env)?"
    )
    assert out.stderr == f"inbox: {answer['message']}\n"  # once, not wrapped in itself


@pytest.mark.parametrize(
    ("auth", "words"),
    [
        (":wrong-password@", "refused the connection: the password is wrong"),
        ("", "refused the connection: it needs a password and none was given"),
    ],
)
def test_a_refused_password_is_told_apart_from_no_server(
    tmp_path: Path, guarded: EmbeddedRedis, auth: str, words: str
) -> None:
    url = f"redis://{auth}127.0.0.1:{guarded.port}/0"
    out = inbox(bare_env(tmp_path, INBOX_REDIS_URL=url), "status")
    assert out.returncode == 3
    answer = json.loads(out.stdout)
    assert answer["error"] == "unavailable" and answer["reason"] == "password"
    assert words in answer["message"] and "did not answer" not in answer["message"]
    assert "INBOX_REDIS_URL" in answer["message"]
    assert guarded.password and guarded.password not in out.stdout + out.stderr


@pytest.mark.parametrize(
    ("exc", "message"),
    [
        (
            redis.ConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused."),
            "Redis did not answer at 127.0.0.1:1 (connection refused)",
        ),
        (
            redis.ConnectionError("Error connecting to h:7."),
            "Redis did not answer at h:7 (no answer)",
        ),
        (
            redis.TimeoutError("Timeout reading from socket"),
            "Redis did not answer (no answer in time)",
        ),
        (
            redis.AuthenticationError("invalid username-password pair or user is disabled."),
            "Redis refused the connection: the password is wrong",
        ),
    ],
)
def test_down_message_words(exc: BaseException, message: str) -> None:
    assert down_message(exc)[0].startswith(message)


class Hangup:
    """A loopback listener that accepts each connection and closes it: counts the tries."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()


def test_a_client_that_never_reached_redis_tries_once(tmp_path: Path) -> None:
    hangup = Hangup()
    try:
        client = redis_client(
            Settings(home=tmp_path, redis_url=f"redis://127.0.0.1:{hangup.port}/0")
        )
        with pytest.raises(redis.ConnectionError):
            client.ping()
        assert hangup.accepted == 1  # without the rule: 1 + 4 retries with backoff
    finally:
        hangup.close()


def test_a_client_that_reached_redis_retries_a_dropped_connection(tmp_path: Path) -> None:
    sock = tmp_path / "r" / "redis.sock"
    with EmbeddedRedis(sock, tmp_path / "r", persist=False):
        client = redis_client(Settings(home=tmp_path, redis_url=f"unix://{sock}"))
        assert client.ping()
        other = redis.Redis(unix_socket_path=str(sock))
        killed = other.client_kill_filter(_type="normal", skipme=True)
        assert killed >= 1  # the client's pooled connection is gone
        assert client.ping()  # retried on a fresh connection
        other.close()
        client.close()
