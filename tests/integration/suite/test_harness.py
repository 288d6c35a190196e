"""The test harness itself: the Redis server the suite starts when none answers.

A fresh machine has no Redis on 6379, so ``redis_url`` (tests/conftest.py) starts its own;
these tests take that path whatever answers here, so a green run proves it works.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import redis
from kombu import Connection

from bus.api import Bus
from bus.core.settings import Settings
from tests.support.local_servers import own_redis_server


def _own_folders() -> set[Path]:
    return set(Path(tempfile.gettempdir()).glob("inbox-test-redis-*"))


def test_the_self_started_servers_url_works_for_the_store_and_the_broker(tmp_path: Path) -> None:
    with own_redis_server() as url:
        client = redis.Redis.from_url(url, decode_responses=True)
        try:
            assert client.ping()
            client.set("harness:probe", "1")
            assert client.get("harness:probe") == "1"
        finally:
            client.close()
        # The bus on it, as every test's `bus` fixture makes one.
        b = Bus(Settings(home=tmp_path, host="hosta", redis_url=url, key_prefix="harness"))
        b.open_session("probe")
        assert [s["session"] for s in b.status()["sessions"]] == ["probe"]
        b.store.r.close()
        # Celery's broker URL is the same URL (tests/conftest.py `settings`).
        with Connection(url, connect_timeout=5) as conn:
            conn.ensure_connection(max_retries=1)


def test_the_self_started_servers_folder_is_removed_even_when_the_block_fails() -> None:
    before = _own_folders()
    with pytest.raises(RuntimeError, match="boom"), own_redis_server() as url:
        (folder,) = _own_folders() - before
        assert (folder / "password").exists()  # the generated password, beside the socket
        assert redis.Redis.from_url(url).ping()
        raise RuntimeError("boom")
    assert not folder.exists()
    assert _own_folders() - before == set()


def test_the_session_redis_answers(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.ping()
    finally:
        client.close()
