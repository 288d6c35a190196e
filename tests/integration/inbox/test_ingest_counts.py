"""What a batched send costs, counted (bus/services/send_many.py, bus/store/lua/append_many.lua): commands
sent, script calls, round trips, and the commands Redis runs per message (INFO
commandstats on a private redis-server, so nothing else is counted). Counts, never times.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import redis

from bus.api import Bus
from bus.core.models import now_ms
from bus.core.settings import Settings
from bus.delivery.dispatch import RecordingDispatcher
from bus.ops.embedded import EmbeddedRedis
from bus.services import send_many
from bus.store import ingest
from bus.store.keys import IDS_KEEP_DAYS
from bus.store.receipt_index import BUCKETS, bucket_of, day_of


def named(args: tuple[Any, ...]) -> str:
    """A command's name (``SCRIPT LOAD``, ``HSET``), an ``EVALSHA`` with its SHA."""
    name = str(args[0]).upper()
    return f"{name} {str(args[1]).upper()}" if name in ("EVALSHA", "SCRIPT") else name


class Recording(redis.Redis):
    """A client that records each command it sends and each round trip."""

    sent: list[str]
    trips: int

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.sent.append(named(args))
        self.trips += 1
        return super().execute_command(*args, **options)

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        pipe = super().pipeline(transaction, shard_hint)
        real, immediate = pipe.execute, pipe.immediate_execute_command

        def execute(raise_on_error: bool = True) -> Any:
            if pipe.command_stack:
                self.trips += 1
                self.sent.extend(named(args) for args, _o in pipe.command_stack)
            return real(raise_on_error)

        def immediate_execute(*args: Any, **options: Any) -> Any:  # SCRIPT EXISTS / LOAD
            self.sent.append(named(args))
            self.trips += 1
            return immediate(*args, **options)

        pipe.execute = execute
        pipe.immediate_execute_command = immediate_execute
        return pipe


@pytest.fixture(scope="module")
def own_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    tmp = tmp_path_factory.mktemp("counts")
    with EmbeddedRedis(tmp / "r.sock", tmp / "data", persist=False) as server:
        yield server


@pytest.fixture
def counted(own_redis: EmbeddedRedis, tmp_path: Path) -> Iterator[tuple[Bus, Recording]]:
    """A bus on the private server (no sender rate: only the batch is counted), its
    client recording, sessions s1..s3 open."""
    client = Recording.from_url(own_redis.url, decode_responses=True)
    client.sent, client.trips = [], 0
    client.flushall()
    home = tmp_path / "home"
    home.mkdir()
    s = Settings(home=home, host="hosta", redis_url=own_redis.url, key_prefix="n", send_rate=0)
    b = Bus(s, client=client, dispatcher=RecordingDispatcher())
    # A batch's packed pipelines (RoundTrips.run_packed) bypass redis-py's: counted here.
    store, run_packed = b.store, b.store.run_packed

    def counted_run(commands: list[tuple[Any, ...]]) -> list[Any]:
        client.sent.extend(named(c) for c in commands)
        client.trips += 1
        return run_packed(commands)

    store.run_packed = counted_run  # type: ignore[method-assign]
    for sid in ("s1", "s2", "s3"):
        b.open_session(sid)
    yield b, client
    client.close()


def batch(n: int, tag: str = "m") -> list[dict[str, Any]]:
    return [
        {
            "id": f"{tag}-{i}",
            "from": "hosta:alice",
            "from_session": "alice",
            "to_id": f"s{i % 3 + 1}",
            "text": f"message {i}",
        }
        for i in range(n)
    ]


def bare(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``items`` without their ids: the bus makes them (no id-owner check to pay for)."""
    return [{f: v for f, v in item.items() if f != "id"} for item in items]


def owner_lookups(items: list[dict[str, Any]]) -> int:
    """The id-owner check's index buckets for caller-chosen ids (bus.services.id_owner):
    each bucket the ids fall in, for each day kept, looked at by ids_indexed.lua."""
    return len({bucket_of(item["id"]) for item in items}) * (IDS_KEEP_DAYS + 1)


def owner_calls(items: list[dict[str, Any]]) -> int:
    """The id-owner check's ids_indexed.lua calls on a cluster: one for each bucket the
    ids fall in (its days kept share a slot)."""
    return len({bucket_of(item["id"]) for item in items})


def buckets_held(b: Bus, items: list[dict[str, Any]]) -> int:
    """How many of today's index buckets the items' ids fall in exist already (the
    lookup reads those: no other day's does)."""
    day = day_of(now_ms())
    keys = {b.store.k.rcpt_bucket(day, bucket_of(item["id"])) for item in items}
    return sum(int(b.store.r.exists(key)) for key in keys)


def scripts_run(b: Bus, sent: list[str]) -> Counter[str]:
    names = {
        b.store.script(n).sha.upper(): n
        for n in ("append_many", "receipt_open", "rate", "ids_indexed")
    }
    return Counter(
        names.get(c.removeprefix("EVALSHA ").strip(), c) for c in sent if c.startswith("EVALSHA")
    )


def redis_calls(r: redis.Redis) -> Counter[str]:
    return Counter(
        {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in r.info("commandstats").items()}
    )


def test_a_batch_is_one_script_call_and_one_round_trip_once_its_receivers_were_read(
    counted: tuple[Bus, Recording],
) -> None:
    b, client = counted
    b.send_many(batch(3, "warm"))  # the server has the script, this process the records
    client.sent, client.trips = [], 0
    answers = b.send_many(bare(batch(90)))
    assert [a["state"] for a in answers] == ["stored"] * 90
    # One append_many.lua call for the 3 receivers (the receipts open inside it too), no
    # SCRIPT EXISTS, no read of the receivers first: the index, the appends and the
    # outbox in one round trip.
    assert scripts_run(b, client.sent) == Counter({"append_many": 1})
    assert not [c for c in client.sent if c.startswith("SCRIPT")]
    # Its one HMGET: the receivers' host's beat (the answers' host_state), in that trip.
    assert client.sent.count("HMGET") == 1
    assert client.trips == 1
    # The id -> receiver index: one HSET and one EXPIRE per bucket touched, at most 16.
    hsets = [c for c in client.sent if c.startswith("HSET")]
    assert 0 < len(hsets) <= BUCKETS
    for a in (answers[0], answers[45], answers[89]):
        assert b.receipt(a["id"], by="alice")["state"] == "stored"
    # Ids the caller chose: one round trip more, before any write, reads the id index
    # (no id may be another sender's), however large the batch.
    client.sent, client.trips = [], 0
    answers = b.send_many(batch(90))
    assert [a["state"] for a in answers] == ["stored"] * 90
    assert scripts_run(b, client.sent) == Counter({"append_many": 1, "ids_indexed": 1})
    assert client.sent.count("HMGET") == 1  # the host's beat, as above
    assert client.trips == 1 + 1
    for n in (0, 45, 89):
        assert b.receipt(f"m-{n}", by="alice")["state"] == "stored"


def test_receivers_this_process_never_read_take_a_second_round_trip(
    counted: tuple[Bus, Recording],
) -> None:
    b, client = counted
    b.send_many(batch(3, "warm"))
    send_many._RECORDS.clear()
    client.sent, client.trips = [], 0
    answers = b.send_many(bare(batch(90)))
    assert [a["state"] for a in answers] == ["stored"] * 90
    assert not any(a["duplicate"] for a in answers)
    # The first call read the records and wrote nothing; the second stored the batch.
    assert scripts_run(b, client.sent) == Counter({"append_many": 2})
    assert client.trips == 2
    assert sum(b.store.r.xlen(b.store.k.s(s, "stream")) for s in ("s1", "s2", "s3")) == 93


def test_a_call_per_few_receivers_or_one_each_stores_the_same(
    counted: tuple[Bus, Recording], monkeypatch: pytest.MonkeyPatch
) -> None:
    # CALL_MESSAGES 1: one receiver a call, as on a cluster (a call's keys in one slot).
    b, client = counted
    b.send_many(batch(3, "warm"))
    for per_call, calls in ((1, 3), (20, 2), (1000, 1)):
        monkeypatch.setattr(ingest, "CALL_MESSAGES", per_call)
        client.sent, client.trips = [], 0
        tag = f"c{per_call}"
        items = [*batch(30, tag), batch(1, tag)[0]]  # the same id twice: stored once
        answers = b.send_many(items)
        assert scripts_run(b, client.sent) == Counter({"append_many": calls, "ids_indexed": 1})
        assert client.trips == 1 + 1  # the writes, after the id-owner check (caller's ids)
        assert [a["state"] for a in answers] == ["stored"] * 31
        assert [a["duplicate"] for a in answers] == [False] * 30 + [True]
        assert answers[30] == {**answers[0], "duplicate": True}
        assert [a["recipient"]["session"] for a in answers[:3]] == ["s1", "s2", "s3"]
        again = b.send_many(batch(30, tag))
        assert [a["duplicate"] for a in again] == [True] * 30
        assert [{**a, "duplicate": False} for a in again] == answers[:30]
        assert b.receipt(f"{tag}-29", by="alice")["state"] == "stored"
    streams = [b.store.r.xlen(b.store.k.s(s, "stream")) for s in ("s1", "s2", "s3")]
    assert streams == [1 + 30, 1 + 30, 1 + 30]


def test_redis_runs_two_commands_a_stored_message(counted: tuple[Bus, Recording]) -> None:
    b, client = counted
    b = b.with_settings(replace(b.settings, max_unread=1000))  # the cap counted: once per receiver
    b.send_many(batch(3, "warm"))  # this process has read the receivers' records
    client.delete(*(b.store.k.s(sid, "pending") for sid in ("s1", "s2", "s3")))
    held = buckets_held(b, batch(90))
    before = redis_calls(client)
    b.send_many(batch(90))
    ran = redis_calls(client) - before
    ran.pop("info", None)
    # The caller chose the ids: the id-owner check first, per batch (not per message):
    # an EXISTS per index bucket and day kept, an HMGET of each that exists.
    lookups = owner_lookups(batch(90))
    assert lookups <= BUCKETS * (IDS_KEEP_DAYS + 1)
    ran["exists"] -= lookups
    ran["hmget"] -= held
    ran.pop("evalsha", None)
    # Each message: XADD queue, XADD events. Each receiver: HMGET session (the record the
    # answers were made from), HMGET ids (every message's prior answer at once), XLEN +
    # HLEN (the cap), HSET ids (the answers and the receipts), ZADD threads (the ages),
    # SET pending (its flag was unset). The call (its 3 receivers): one MGET of the trims
    # and dispatch flags, one EXISTS of every receipt hash (from before, or bounced).
    # The batch: HSET + EXPIRE per index bucket, the outbox's three, and the kick list's
    # look for a live delivery loop (none here: the dispatches go to the fallback); an
    # HMGET of the receivers' host's beat (one per host: the answers' host_state).
    assert ran["xadd"] == 2 * 90
    assert ran["xlen"] == ran["hlen"] == ran["set"] == 3
    assert "pexpire" not in ran and ran["hset"] == 3 + BUCKETS
    assert "hget" not in ran and "get" not in ran and ran["hmget"] == 3 + 3 + 1
    assert ran["mget"] == 1
    assert ran["exists"] == 1 + 1  # the call's receipt hashes, and the kick push's look
    assert "hexists" not in ran and "del" not in ran
    assert sum(ran.values()) <= 2 * 90 + 7 * 3 + 2 + 2 * BUCKETS + 3 + 1 + 1
    # Flags set: the next batch's receivers are dispatched already, no SET.
    before = redis_calls(client)
    b.send_many(batch(90, "again"))
    ran = redis_calls(client) - before
    assert "set" not in ran and ran["mget"] == 1


def test_scripts_lost_by_the_server_are_loaded_and_the_batch_stored_once(
    counted: tuple[Bus, Recording],
) -> None:
    b, client = counted
    b.send_many(batch(6, "warm"))  # the scripts are loaded, the store knows their SHAs
    client.script_flush()
    client.sent = []
    answers = b.send_many(batch(9))
    assert [a["state"] for a in answers] == ["stored"] * 9
    assert not any(a.get("duplicate") for a in answers)
    # The id lookup's script and the appends' each loaded once, when the server said NOSCRIPT.
    assert client.sent.count("SCRIPT LOAD") == 2 and "SCRIPT EXISTS" not in client.sent
    for sid in ("s1", "s2", "s3"):
        assert b.store.r.xlen(b.store.k.s(sid, "stream")) == 2 + 3
    assert b.receipt("m-4", by="alice")["state"] == "stored"
    again = b.send_many(batch(9))  # a resend: each its first answer, nothing stored twice
    assert all(a["duplicate"] for a in again)
    assert sum(b.store.r.xlen(b.store.k.s(s, "stream")) for s in ("s1", "s2", "s3")) == 15


def test_a_batch_on_the_cluster_opens_its_receipts_as_on_a_server(
    cluster_settings: Settings,
) -> None:
    b = Bus(replace(cluster_settings, send_rate=0), dispatcher=RecordingDispatcher())
    try:
        for sid in ("s1", "s2", "s3"):
            b.open_session(sid)
        # The nodes have the scripts (a first call may load them).
        b.send_many([*batch(3, "warm"), {**batch(1, "warm")[0], "to_id": "ghost"}])
        items = [*batch(30), {**batch(1)[0], "id": "ghost-1", "to_id": "ghost"}]
        shas: list[str] = []
        # Scripts and commands go one pipeline per node (bus.store.cluster.run_commands):
        # the ordered batch of appends and the independent id lookups alike.
        from bus.store import cluster

        real = cluster.run_commands

        def counted(client: Any, commands: list[Any], sources: Any) -> list[Any]:
            shas.extend(named(args) for args, _o in commands if str(args[0]) == "EVALSHA")
            return real(client, commands, sources)

        cluster.run_commands = counted
        try:
            answers = b.send_many(items)
        finally:
            cluster.run_commands = real
        assert [a["state"] for a in answers] == ["stored"] * 30 + ["bounced"]
        # One script per receiver, each in its slot (the ghost's reads its record, writes
        # nothing); only the bounce opens its receipt apart, next round trip. The id lookup
        # a call per index bucket (its days in its slot), one pipeline per node, before.
        assert scripts_run(b, shas) == Counter(
            {"append_many": 4, "receipt_open": 1, "ids_indexed": owner_calls(items)}
        )
        assert all(a.get("duplicate") for a in b.send_many(batch(30)))
        for n in (0, 1, 2, 29):
            got = b.receipt(f"m-{n}", by="alice")
            assert got["state"] == "stored" and got["to"] == f"s{n % 3 + 1}"
        assert b.receipt("ghost-1", by="alice")["state"] == "bounced"
        sent = b.receipts.sent("alice", limit=100)["sent"]
        assert [r["id"] for r in sent][:31] == [
            "ghost-1",
            *(f"m-{n}" for n in reversed(range(30))),
        ]
    finally:
        if b._store is not None:
            b._store.r.close()


@pytest.mark.parametrize(
    "args",
    [
        ("HSET", "n:{s1}:ids", "m-1", '{"ok": true, "id": "m-1"}'),
        ("ZADD", "n:{h}:outbox", b"NX", 1_700_000_000_000_123, "s1|m-1"),
        ("ZREMRANGEBYSCORE", "k", "-inf", 1.5),
        ("EVALSHA", "ab" * 20, 2, "k1", "k2", "héllo ✓\nnext\n", ""),
        ("SCRIPT", "LOAD", "return 1"),
        ("EXPIRE", "n:{rc:1}:rcpt", 691200),
        ("HSET", "n:{s1}:ids", "m-2", '{"r":"ünï ✓"}', "m-3", "x"),
    ],
)
@pytest.mark.parametrize("packer", ["hiredis", "python"])
def test_packed_commands_are_the_bytes_redis_py_sends(
    args: tuple[Any, ...], packer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # bus.store.many.pack_commands replaces redis-py's packing for a batch's pipelines.
    from bus.store import many

    if packer == "python":
        monkeypatch.setattr(many, "_hiredis_pack", None)
    conn = redis.Connection()
    expected = b"".join(conn.pack_commands([args, args]))
    assert many.pack_commands([("PING",), args, args])[len(b"*1\r\n$4\r\nPING\r\n") :] == expected


def test_an_argument_hiredis_refuses_packs_the_whole_call_in_python() -> None:
    from bus.store.many import pack_commands

    packed = pack_commands([("PING",), ("SET", "k", True)])
    assert packed == b"*1\r\n$4\r\nPING\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4\r\nTrue\r\n"


def test_a_batch_whose_replies_are_lost_is_resent_and_stored_once(
    counted: tuple[Bus, Recording], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A packed pipeline whose connection fails after the request went out: the error is
    # raised (the client's retry policy, none here, as a redis-py pipeline), the
    # connection is dropped (never reused with its replies unread), and the caller's
    # resend gets each message's first answer.
    from bus.core.errors import BusError

    b, _client = counted
    b.send_many(batch(3, "warm"))
    real = redis.connection.AbstractConnection.send_packed_command
    failures = [1]
    appends = b.store.script("append_many").sha.encode()

    def flaky(self: Any, command: Any, check_health: bool = True) -> None:
        real(self, command, check_health)
        packed = b"".join(command)
        if failures and appends in packed:  # the writes went out
            failures.pop()
            raise redis.exceptions.ConnectionError("connection reset")

    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", flaky)
    with pytest.raises((redis.exceptions.ConnectionError, BusError)):
        b.send_many(batch(30))
    assert not failures
    answers = b.send_many(batch(30))
    assert [a["state"] for a in answers] == ["stored"] * 30
    assert all(a.get("duplicate") for a in answers)
    assert sum(b.store.r.xlen(b.store.k.s(s, "stream")) for s in ("s1", "s2", "s3")) == 33
