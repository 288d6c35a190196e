"""A stored message's receipt kept in its recipient's ``ids`` hash beside its answer (issue
13, memory): every reader answers the receipt a bounced one's ``rc:<id>`` hash answers, and the
receipt lives as long as the hash would."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from bus.api import Bus
from bus.core.clock import ManualClock
from bus.core.errors import NotFound
from bus.core.models import now_ms
from bus.core.settings import Settings
from bus.delivery.receipts import receipt_ttl_ms
from bus.store.inbox import IDS_KEEP_MS
from tests.support.cli import inbox
from tests.support.gateway_server import Server
from tests.support.mcp_client import call, mcp_client, ok
from tests.support.sessions import pair, send

DAY_MS = 86400 * 1000


def folded(b: Bus, to: str, msg_id: str) -> dict[str, Any] | None:
    raw = b.store.r.hget(b.store.k.s(to, "ids"), f"~{msg_id}")
    return json.loads(raw) if raw else None


def every_reader(b: Bus, gw: Server, msg_id: str) -> list[Any]:
    """The receipt through the API, the CLI and HTTP, and the sender's outbox."""
    out = inbox(b.settings.child_env(), "receipt", msg_id, "--by", "alice")
    assert out.returncode == 0, out.stderr
    http = gw.client.get(f"/v1/messages/{msg_id}", params={"by": "alice"})
    assert http.status_code == 200
    sent = b.sent("alice")["sent"]
    return [b.receipt(msg_id, by="alice"), json.loads(out.stdout), http.json(), sent]


def test_every_reader_answers_the_same_receipt_from_ids(
    bus: Bus,
    gateway: Callable[[Bus], Server],
) -> None:
    gw = gateway(bus)
    pair(bus)
    bus.turn("bob", "start")
    sent = send(bus)
    bus.deliver_session("bob")
    bus.drain("bob")
    bus.read("bob", sent["thread"], mark_read=True)
    bus.turn("bob", "end", answer="done")
    assert bus.store.r.exists(bus.store.k.receipt("bob", sent["id"])) == 0
    new = every_reader(bus, gw, sent["id"])
    rc = new[0]
    assert rc["state"] == "answered" and rc["answer"] == "done"
    assert list(rc["at"]) == ["stored", "noticed", "read", "answered"]
    assert (rc["thread"], rc["to"]) == (sent["thread"], "bob")
    assert new[1] == new[2] == rc and new[3] == [rc]


@pytest.mark.anyio
async def test_mcp_reads_a_folded_receipt(settings: Settings, bus: Bus) -> None:
    bus.open_session("me", handle="hosta:me")
    bus.open_session("peer", handle="hosta:peer")
    async with mcp_client(settings, "me") as me:
        sent = ok(await call(me, "send", handle="hosta:peer", text="look"))
        assert folded(bus, "peer", sent["id"]) is not None
        got = ok(await call(me, "receipt", message_id=sent["id"]))
    assert got["state"] == "stored" and got["thread"] == sent["thread"]
    assert got == bus.receipt(sent["id"], by="me")


def test_a_bounced_receipt_is_a_hash_and_gives_way_to_one_in_ids(bus: Bus) -> None:
    k = bus.store.k
    bus.open_session("alice")
    one, two = send(bus, to="nobody"), send(bus, to="nobody", text="again")
    for sent in (one, two):
        assert bus.store.r.pttl(k.receipt("nobody", sent["id"])) > 0
        assert bus.receipt(sent["id"], by="alice")["state"] == "bounced"
    assert bus.store.r.exists(k.s("nobody", "ids")) == 0
    bus.open_session("nobody")
    assert send(bus, to="nobody", id=one["id"])["state"] == "stored"
    [again] = bus.send_many([{"id": two["id"], "from": "hosta:alice", "from_session": "alice",
                              "to_id": "nobody", "text": "again"}])  # fmt: skip
    assert again["state"] == "stored"
    for sent in (one, two):
        assert bus.store.r.exists(k.receipt("nobody", sent["id"])) == 0
        assert set(folded(bus, "nobody", sent["id"]) or {}) == {"from", "from_session", "stored"}
        rc = bus.receipt(sent["id"], by="alice")
        assert rc["state"] == "stored" and "bounced" not in rc["at"] and "reason" not in rc


@pytest.mark.parametrize("expire_days", [7, 30])
def test_a_receipt_in_ids_lives_its_ttl_from_its_last_transition(
    make_bus: Callable[..., Bus], expire_days: int
) -> None:
    clock = ManualClock(now_ms())
    b = make_bus(clock=clock, expire_s=expire_days * 86400.0)
    ttl = receipt_ttl_ms(b.settings.expire_s)
    assert ttl == (expire_days + 1) * DAY_MS
    ids, threads = b.store.k.s("bob", "ids"), b.store.k.s("bob", "threads")
    pair(b)
    b.turn("bob", "start")
    start = clock.ms
    moved = send(b, text="read")
    b.deliver_session("bob")
    b.drain("bob")
    b.read("bob", moved["thread"], mark_read=True)  # its last transition: read
    quiet = send(b, text="never noticed")  # stored, no transition since
    read = b.receipt(moved["id"], by="alice")["at"]["read"]
    stored = b.receipt(quiet["id"], by="alice")["at"]["stored"]
    # Past the answers' 7 days, within the receipts' TTL: both kept, the ages moved on.
    clock.set(start + IDS_KEEP_MS + 3600_000)
    b.inbox.prune("bob")
    for sent in (quiet, moved):
        assert b.store.queue.first_answer("bob", sent["id"]) is not None
        assert b.receipt(sent["id"], by="alice")["state"] in ("stored", "read")
    score = b.store.r.zscore(threads, f"#{moved['id']}")
    assert score == -(read + ttl - IDS_KEEP_MS)
    # Past the TTL since the last transition: the answer and its receipt go together.
    clock.set(max(read, stored) + ttl + 1)
    b.inbox.prune("bob")
    for sent in (quiet, moved):
        assert b.store.r.hmget(ids, [sent["id"], f"~{sent['id']}"]) == [None, None]
        assert b.store.r.zscore(threads, f"#{sent['id']}") is None
        with pytest.raises(NotFound):
            b.receipt(sent["id"], by="alice")
