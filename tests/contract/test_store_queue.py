"""The store's queue aggregate: append once per id, cursor, raw line in flight, trim, the
dispatch flag, the recipient index, the senders' buckets (bus/store/queue.py,
bus/store/ingest.py, bus/store/backlogs.py), held to its contract on every backend (a standalone Redis and a Redis
Cluster: tests/support/store_backends.py)."""

# ruff: noqa: F811  (the store fixture, imported from tests.support.store_backends)
from __future__ import annotations

import json

from bus.store.store import Store
from tests.support.store_backends import SIDS, info, store  # noqa: F401  (the fixture)


def test_append_stores_an_id_once_and_dispatches_once(store: Store) -> None:
    store.sessions.put_session(info("s1"))
    first = store.queue.append("s1", "m-1", json.dumps({"id": "m-1"}), '{"n": 1}')
    assert first == (True, '{"n": 1}', True)
    # Again: nothing new, the first answer, no second dispatch.
    assert store.queue.append("s1", "m-1", json.dumps({"id": "m-1"}), '{"n": 2}') == (
        False,
        '{"n": 1}',
        False,
    )
    # Another id while the dispatch flag is up: stored, no dispatch.
    assert store.queue.append("s1", "m-2", json.dumps({"id": "m-2"}), '{"n": 3}')[0::2] == (
        True,
        False,
    )
    # Restored whole (bus/store/packing.py): what the key says (the id, ok, duplicate) comes back.
    whole = {"ok": True, "id": "m-1", "n": 1, "duplicate": False}
    assert store.queue.first_answer("s1", "m-1") == whole
    assert store.queue.first_answers("s1", ["m-2", "nope"]) == [
        {**whole, "id": "m-2", "n": 3},
        None,
    ]
    assert store.queue.recipient_of("m-1") == "s1"
    rows = store.queue.read_after("s1", "0-0")
    assert [f["id"] for _e, f in rows] == ["m-1", "m-2"]
    assert store.queue.backlog("s1") == 2


def test_cursor_advance_and_rawflight(store: Store) -> None:
    for i in range(3):
        store.queue.append("s2", f"m{i}", "{}", "{}")
    rows = store.queue.read_after("s2", "0-0")
    store.queue.set_rawflight("s2", rows[0][0], "m0")
    assert store.queue.rawflight("s2") == {"stream_id": rows[0][0], "id": "m0"}
    store.queue.advance("s2", rows[0][0])
    assert store.queue.cursor("s2") == rows[0][0] and store.queue.rawflight("s2") is None
    assert [f["id"] for _e, f in store.queue.read_after("s2", store.queue.cursor("s2"))] == [
        "m1",
        "m2",
    ]
    assert store.queue.backlog("s2") == 2
    store.queue.advance("s2", rows[-1][0])
    assert store.queue.backlog("s2") == 0


def test_the_dispatch_flag_is_taken_once_until_cleared(store: Store) -> None:
    assert store.queue.mark_pending("s4") is True
    assert store.queue.mark_pending("s4") is False
    store.queue.clear_pending("s4")
    assert store.queue.mark_pending("s4") is True


def test_records_go_to_the_sessions_event_log(store: Store) -> None:
    store.events.record("s9", "inbox", ids=["a", "b"], note="x")
    rows = store.r.xrange(store.k.s("s9", "events"))
    assert len(rows) == 1
    fields = rows[0][1]
    assert fields["kind"] == "inbox" and json.loads(fields["ids"]) == ["a", "b"]
    assert fields["note"] == "x" and int(fields["at"]) > 0


def test_the_trim_floor_keeps_the_last_delivered_while_some_wait(store: Store) -> None:
    for i in range(30):
        store.queue.append("s10", f"m{i}", "{}", "{}")
    rows = store.queue.read_after("s10", "0-0")
    store.queue.advance("s10", rows[-2][0])  # the newest one is not taken yet
    store.queue.set_trim_floor("s10", keep=5)
    assert store.r.get(store.k.s("s10", "trim")) == rows[-7][0]
    assert store.queue.read_after("s10", store.queue.cursor("s10")) == rows[-1:]


def test_a_queue_taken_whole_is_emptied(store: Store) -> None:
    for i in range(30):
        store.queue.append("s11", f"m{i}", "{}", "{}")
    rows = store.queue.read_after("s11", "0-0")
    store.queue.advance("s11", rows[-1][0])
    store.queue.set_trim_floor("s11", keep=5)
    assert store.r.xlen(store.k.s("s11", "stream")) == 0
    store.queue.append("s11", "m30", "{}", "{}")
    assert [f["id"] for _e, f in store.queue.read_after("s11", store.queue.cursor("s11"))] == [
        "m30"
    ]


def test_many_appends_are_read_back_per_session_in_one_call_each(store: Store) -> None:
    assert store.queue.last_stream_id("s1") == "0-0"
    assert store.queue.recipients_of([]) == {} and store.queue.queued_message("s1", "m") is None
    for sid in SIDS:
        store.sessions.put_session(info(sid))
        store.queue.append(sid, f"m-{sid}", json.dumps({"id": f"m-{sid}"}), "{}")
    ids = [f"m-{sid}" for sid in SIDS]
    assert store.queue.recipients_of([*ids, "m-none"]) == {f"m-{sid}": sid for sid in SIDS}
    assert store.queue.indexed([*ids, "m-none"], store.server_time_ms()) == {
        f"m-{sid}": sid for sid in SIDS
    }
    assert store.queue.backlogs(SIDS) == [1] * len(SIDS)
    assert store.queue.last_stream_id("s3") == store.queue.read_after("s3", "0-0")[0][0]
    queued = store.queue.queued_message("s3", "m-s3")
    assert queued is not None and json.loads(queued["m"]) == {"id": "m-s3"}
    assert store.queue.queued_message("s3", "m-s4") is None  # another session's


def test_a_refused_batch_s_index_entries_are_forgotten(store: Store) -> None:
    store.sessions.put_session(info("s1"))
    store.queue.append("s1", "m1", json.dumps({"id": "m1"}), "{}")
    store.queue.append("s1", "m2", json.dumps({"id": "m2"}), "{}")
    store.queue.unindex_many(["m1"], store.server_time_ms())
    assert store.queue.recipients_of(["m1", "m2"]) == {"m2": "s1"}


def test_the_dispatch_flag_is_set_once_for_each_of_many_sessions(store: Store) -> None:
    store.queue.mark_pending("s2")
    assert store.queue.mark_pending_many(SIDS) == [sid != "s2" for sid in SIDS]
    assert store.queue.mark_pending_many(SIDS) == [False] * len(SIDS)
    store.queue.clear_pending("s5")
    assert store.queue.mark_pending_many(["s5", "s6"]) == [True, False]


def test_a_sender_s_bucket_gives_at_most_its_burst_and_takes_back_what_it_gave(
    store: Store,
) -> None:
    # A rate this low refills nothing within the test: only the burst is there.
    assert [store.queue.take_send_token("ann", 0.001, 2) for _ in range(3)] == [True, True, False]
    got = store.queue.take_tokens({"bob": 3, "cy": 5, "none": 0}, 0.001, 4, partial=True)
    assert got == {"bob": 3, "cy": 4}
    assert store.queue.take_tokens({"bob": 2}, 0.001, 4, partial=False) == {"bob": 0}
    store.queue.give_tokens({"bob": 3}, 0.001, 4)
    assert store.queue.take_tokens({"bob": 4}, 0.001, 4, partial=False) == {"bob": 4}
