"""The pure rules: which error replies refuse writes, what INFO shows, what a wait's reply meets."""

from __future__ import annotations

import pytest
import redis

from bus.core import durability
from bus.core.errors import BadInput
from bus.core.store_faults import fault_of, fault_of_info


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("MISCONF Redis is configured to save RDB snapshots, but ...", "disk"),
        ("READONLY You can't write against a read only replica.", "read_only"),
        ("OOM command not allowed when used memory > 'maxmemory'.", "memory"),
        ("NOREPLICAS Not enough good replicas to write.", "replicas"),
        ("ERR unknown command 'FROB'", None),
        ("WRONGTYPE Operation against a key holding the wrong kind of value", None),
    ],
)
def test_error_replies_that_refuse_writes(reply: str, reason: str | None) -> None:
    fault = fault_of(reply)
    assert (fault.reason if fault else None) == reason


@pytest.mark.parametrize(
    ("info", "stop", "reason"),
    [
        ({"aof_last_write_status": "err"}, True, "disk"),
        ({"rdb_last_bgsave_status": "err"}, True, "disk"),
        ({"rdb_last_bgsave_status": "err"}, False, None),
        ({"role": "slave"}, True, "read_only"),
        ({"maxmemory": 100, "used_memory": 200, "maxmemory_policy": "noeviction"}, True, "memory"),
        ({"maxmemory": 100, "used_memory": 200, "maxmemory_policy": "allkeys-lru"}, True, None),
        ({"maxmemory": 0, "used_memory": 200}, True, None),
        ({"role": "master", "rdb_last_bgsave_status": "ok"}, True, None),
    ],
)
def test_info_that_shows_a_write_fault(
    info: dict[str, object], stop: bool, reason: str | None
) -> None:
    fault = fault_of_info(info, stop_writes=stop)
    assert (fault.reason if fault else None) == reason


@pytest.mark.parametrize(
    ("level", "reply", "met"),
    [
        ("disk", [1, 0], True),
        ("disk", [0, 0], False),
        ("replica", 1, True),
        ("replica", 0, False),
        (
            "disk",
            redis.ResponseError(
                "WAITAOF cannot be used when numlocal is set but appendonly is disabled."
            ),
            False,
        ),
    ],
)
def test_what_a_waits_reply_meets(level: str, reply: object, met: bool) -> None:
    assert (durability.shortfall(level, reply, 1.0) is None) is met


def test_levels_and_their_commands() -> None:
    assert durability.wait_command("memory", 2) is None
    assert durability.wait_command("disk", 2) == ("WAITAOF", 1, 0, 2000)
    assert durability.wait_command("replica", 0.25) == ("WAIT", 1, 250)
    assert durability.level_of(None, "disk") == "disk"
    with pytest.raises(BadInput):
        durability.level_of("fsync", "memory")
    assert durability.lacks_wait(redis.ResponseError("unknown command 'WAITAOF', with args"))


@pytest.mark.parametrize(
    ("info", "has"),
    [
        ({"redis_version": "6.2.14"}, False),
        ({"redis_version": "7.0.15"}, False),
        ({"redis_version": "7.2.4"}, True),
        ({"redis_version": "8.0.2"}, True),
        # Valkey reports redis_version 7.2.4 for compatibility: its own version counts.
        ({"redis_version": "7.2.4", "valkey_version": "9.1.0"}, True),
        ({"redis_version": "7.2.4", "valkey_version": "7.2.4", "server_name": "valkey"}, True),
        ({}, False),
    ],
)
def test_which_servers_have_waitaof(info: dict[str, str], has: bool) -> None:
    assert durability.has_waitaof(info) is has
    disk = durability.unmet_by("disk", {**info, "aof_enabled": "1"}, fsyncs_always=False)
    assert (disk is None) is has
