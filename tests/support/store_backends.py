"""The store's contract suites run on every backend: a standalone Redis, a Redis Cluster
and fakeredis.

Each ``tests/contract/test_store_*.py`` holds one aggregate of :class:`bus.store.store.Store` to its
docstrings; the ``store`` fixture runs each test once on a standalone server, once on a
real 3-master cluster (started once per session, see ``redis_cluster_url``) and once on
fakeredis with its Lua (``fakeredis[lua]``), the in-process double the README offers
users for their own tests. Sessions are spread over many slots (:data:`SIDS`), so the
cluster's multi-session calls cross nodes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from bus.core.models import SessionInfo
from bus.store.cluster import cluster_client
from bus.store.keys import Keys
from bus.store.store import Store

SIDS = [f"s{i}" for i in range(12)]


@pytest.fixture(params=["redis", "cluster", "fakeredis"])
def store(request: pytest.FixtureRequest, prefix: str) -> Iterator[Store]:
    client: Any
    if request.param == "fakeredis":
        import fakeredis

        client = fakeredis.FakeRedis(decode_responses=True)
    elif request.param == "redis":
        client = redis.Redis.from_url(request.getfixturevalue("redis_url"), decode_responses=True)
    else:
        client = cluster_client(request.getfixturevalue("redis_cluster_url"))
    s = Store(client, Keys(prefix), lock_ttl_ms=2000)
    yield s
    for key in client.scan_iter(match=f"{prefix}:*", count=1000):
        client.delete(key)
    client.close()


def info(sid: str, handle: str = "h:a", opened_at: int = 0) -> SessionInfo:
    return SessionInfo(session=sid, handle=handle, host="hosta", opened_at=opened_at)
