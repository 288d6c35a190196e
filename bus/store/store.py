"""The Redis store: one bus's data, as a few aggregates over one core.

:class:`Store` is the plumbing (:class:`~bus.store.core.StoreCore`: the client, the
scripts, the pipelines) and its aggregates, each an attribute: ``sessions``, ``members``,
``queue``, ``inbox``, ``receipts``, ``delivery``, ``schedule``, ``items``, ``events`` and
``server``. A caller names the aggregate that answers: ``store.queue.append(...)``,
``store.inbox.records(...)``. Each attribute is typed by its aggregate's Protocol
(:mod:`bus.store.aggregates`), which callers and fakes type against.

On a cluster each atomic step (one Lua script or one MULTI) touches one hash tag (one
session, one thread, one host's kick list, or one global index), so it runs in one slot;
on a standalone server a few scripts take keys of more tags in one call (the lua-one-slot
decision record names them). Keys come from :mod:`bus.store.keys`, which documents each one.

The storage contract: each public method's docstring says what any backend must do, and
each aggregate's suite in ``tests/contract/`` (``test_store_<aggregate>.py``) holds every
backend to it (a standalone Redis, a Redis Cluster, see :mod:`bus.store.cluster`, and
fakeredis). Reads of a missing thing answer empty (``None``, ``[]``, ``0``), never raise.
"""

from __future__ import annotations

import redis

from .aggregates import (
    DeliveryApi,
    EventsApi,
    InboxApi,
    ItemsApi,
    MembersApi,
    QueueApi,
    ReceiptsApi,
    ScheduleApi,
    ServerApi,
    SessionsApi,
)
from .backlogs import BacklogStore
from .beats import BeatStore
from .conversations import ConversationStore
from .core import StoreCore
from .delivery import DeliveryStore
from .durable import DurabilityCheck
from .host_claim import HostClaimStore
from .inbox import InboxStore
from .ingest import IngestStore
from .items import ItemStore
from .keys import Keys
from .kick import KickStore
from .locks import LockStore
from .members import MemberStore
from .metrics import MetricsStore
from .queue import QueueStore
from .receipts import ReceiptStore
from .schedule import ScheduleStore
from .server_config import ConfigStore
from .sessions import SessionStore
from .stream_compact import CompactStore
from .subscriptions import SubsStore
from .write_fault import WriteFaultStore


class Sessions(SessionStore):
    """Session records, their registry (by id, handle, skeleton, parent's lanes), presence
    and who gave whom work."""


class Members(MemberStore):
    """Workspace members, their token generations and revoked token ids."""


class Queue(QueueStore, IngestStore, BacklogStore):
    """A session's queue: the append stored once per id, the batched ingest, the send
    rate's buckets, the recipient index, the dispatch flag, the cursor and its reads, the
    backlogs."""


class Inbox(InboxStore, ConversationStore):
    """A session's inbox (records, marks, notices in flight, answers and their waiters,
    the outbox) and the threads (records, logs, replies' and withdraws' reads)."""


class Receipts(ReceiptStore):
    """Receipts of sent messages and the senders' outboxes."""


class Delivery(DeliveryStore, LockStore, KickStore):
    """A delivery's grouped round trips and its notices, its lock and hand-off flag, and
    the hosts' kick lists."""


class Schedule(ScheduleStore, BeatStore, HostClaimStore):
    """Due times, the sweeps' claims, the processes' heartbeats and the hosts' floors."""


class Items(ItemStore):
    """Items, typed request threads and the bytes of pictures kept."""


class Events(SubsStore, CompactStore):
    """Each session's durability records (``events``), the subscriptions reading them,
    the waits on them, and the compaction of the streams."""


class Server(ConfigStore, MetricsStore, WriteFaultStore, DurabilityCheck):
    """What the store knows of its server: settings, memory report, counters, whether it
    refuses writes and which durability it can meet."""


class Store(StoreCore):
    """Redis-backed storage for one bus (one key prefix), on a server or a cluster: the
    plumbing and its aggregates."""

    def __init__(self, client: redis.Redis, keys: Keys, *, lock_ttl_ms: int = 3000) -> None:
        super().__init__(client, keys, lock_ttl_ms=lock_ttl_ms)
        self.sessions: SessionsApi = Sessions(self)
        self.members: MembersApi = Members(self)
        self.queue: QueueApi = Queue(self)
        self.inbox: InboxApi = Inbox(self)
        self.receipts: ReceiptsApi = Receipts(self)
        self.delivery: DeliveryApi = Delivery(self)
        self.schedule: ScheduleApi = Schedule(self)
        self.items: ItemsApi = Items(self)
        self.events: EventsApi = Events(self)
        self.server: ServerApi = Server(self)
