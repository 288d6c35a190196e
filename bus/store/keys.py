"""Every Redis key the bus uses, built here and only here.

Hash tags keep each session's keys in one slot (``{<sid>}``) and each thread's in
another (``{<thr>}``); on a Redis Cluster no Lua script or MULTI touches two tags. On a
standalone server a few scripts also take keys of other tags (many sessions' in the batch
scripts, the host's kick list in ``append.lua`` and ``notice_finish.lua``), which the
store leaves out on a cluster. The prefix (``INBOX_KEY_PREFIX``, default ``inbox``) lets several
buses, or several tests, share one server.

| key | type | writer | retention |
|---|---|---|---|
| ``P:{sid}:session`` | hash: SessionInfo fields, less ``session``, ``prompt_waiting`` "0", ``state`` ``idle`` and a default handle (bus/store/session_record.py); ``woken_at``: ms of a wake whose turn has not begun (notice_finish.lua; cleared by a turn's start or end, wake_timeout.lua) | session open/close, turns, delivery | kept after close |
| ``P:{sid}:stream`` | stream: one entry per message addressed to the session (``id``, ``m`` = wire JSON) | send (append.lua) | deleted with ``cursor`` once the delivery took every entry (queue_trim.lua); else trimmed by MINID below ``trim`` |
| ``P:{sid}:trim`` | string: stream id below which entries may be trimmed | delivery | - |
| ``P:{sid}:cursor`` | string: last stream id the delivery has taken (none: read from ``0-0``) | delivery | deleted with the emptied queue (queue_trim.lua) |
| ``P:{sid}:ids`` | hash: message id → send answer JSON (idempotency; kept without what the key says, bus/store/packing.py); ``~<id>`` → the sender's receipt of a stored message, JSON: from, from_session, thread (only when not its answer's), reason, and the ms of each state reached (the ``rc:<id>`` hash's fields; one key and its expiry entry fewer a message) | send (append.lua, append_many.lua; receipts: receipt_open.lua, append_many.lua), delivery, withdraw, turn end; receipts: every transition (receipt_mark.lua) | an answer and its receipt are pruned together (at turn end, bus.store.inbox.prune) 7 days after the answer was first seen, or, when later, once the receipt TTL (8 days by default, longer when ``INBOX_EXPIRE_S`` is) has passed since the receipt's last transition (its age in ``threads`` moved on) |
| ``P:{sid}:pending`` | string: a delivery has been dispatched and not started | send; cleared by delivery | TTL (lock_ttl) |
| ``P:{sid}:lock`` | string: token of the delivery running for the session | delivery | TTL (lock_ttl) |
| ``P:{sid}:again`` | string: a delivery found the lock held and handed its work to the holder | delivery (bus/delivery/engine.py) | taken by the holder; TTL (lock_ttl), renewed with the holder's lease |
| ``P:{sid}:rawflight`` | string: JSON of the raw line being written | delivery | cleared after write |
| ``P:{sid}:msgs`` | hash: message id → inbox record JSON (thread, class, mark, wakes; kept without what its message ``m`` says, bus/store/packing.py) | delivery | answered+read pruned past retain |
| ``P:{sid}:new`` | zset: message id → arrival ms, messages not yet in a notice | delivery | - |
| ``P:{sid}:wakeq`` | zset: wake-worthy subset of ``new`` | delivery | - |
| ``P:{sid}:notice`` | hash: the notice being written (id, ids, status) | delivery | - |
| ``P:{sid}:floor`` | hash: notice id → ids of a notice written to the floor, not yet drained | delivery; drain | - |
| ``P:{sid}:carried`` | set: ids noticed during the current turn (answered at turn end) | marks | cleared at turn end |
| ``P:{sid}:waiters`` | set: ids whose senders wait for an answer | send --wait | - |
| ``P:{sid}:ans:{id}`` | list: one answer JSON pushed for a waiting sender | turn end, close | TTL 1 day |
| ``P:{sid}:threads`` | zset: thread id → newest ms, the session's inbox; also ``#<message id>`` → minus its first-seen ms (a send answer's age: below 0, where no thread sorts) | delivery, reply; send | ages pruned after 7 days with the answer (or moved on while its receipt lives: see ``ids``) |
| ``P:{sid}:events`` | stream: durability records (inbox, inbox_noticed, ...) | every transition | MAXLEN ~ 10000; compacted when short, dropped once its newest record is 10 min old (bus/store/compaction.py) |
| ``P:{sid}:gave`` | set: sessions this session gave work to | delivery | - |
| ``P:{sid}:lanes`` | zset: session id → ms its open named ``sid`` its ``parent`` (0: indexed later); a session with no parent is in none | session open, before the record (bus/store/sessions.py) | an entry whose session is gone or has another parent now is taken out by the lookup once a minute old (bus/store/many.py ``lanes_of``) |
| ``P:{thr}:meta`` | hash: key, label, class, parties, state, type; ``one_m``: the thread's only message (no log yet), kept without its usual fields (bus.store.packing.keep_thread_message; no ``newest_at`` / ``newest_preview`` when they are ``one_m``'s ts and text); ``rd:<sid>``: the log id up to which a party's replies marked what it got there read (thread_tail.lua) | delivery, decide; reply (``rd:``) | - |
| ``P:{thr}:log`` | stream: the thread's messages in order, from its second message | delivery, reply | bounded; compacted when short (bus/store/compaction.py) |
| ``P:{thr}:seen`` | set: message ids already in the log (idempotent append), made with the log | delivery | - |
| ``P:{h:<handle>}:sidh`` | hash: session id -> "" for the sessions that carry a handle other than their default ``<host>:<sid>`` (that one names its session) | session open | - |
| ``P:{snd:<sha256(sender)>}:bucket`` | hash: tokens, at: the sender's send rate bucket | send, reply (rate.lua) | expires once full again |
| ``P:{rc:<b>}:rcpt:<day>`` | hash: message id -> the session it was addressed to, for the ids stored on UTC day ``<day>`` in bucket ``<b>`` (bus.store.receipt_index); a bucket's days share a slot | send | TTL 8 days from its last write |
| ``P:rcpt:moved`` | string: ``1``: the index's buckets named ``P:{rc:<day>:<b>}:rcpt`` (a slot per day, as earlier versions wrote them) were moved to the names above | the scheduler, once | - |
| ``P:sessions`` | zset: session id → opened ms (registry) | session open | - |
| ``P:lanes:indexed`` | string: ``1``: every session's ``parent`` is in its parent's ``lanes`` index (the sessions opened before the index were put there by the first lookup) | the lanes lookup, once | - |
| ``P:revoked`` | set: ids (jti) of revoked tokens | token revoke | - |
| ``P:metrics`` | hash: counter name (with labels) → count | send, delivery, scheduler | - |
| ``P:latency`` | hash: histogram bucket → count, plus ``sum`` and ``count`` | delivery | - |
| ``P:due`` | zset: ``<what>|<sid>`` → due ms (wakes, flushes, retries, ``turn``: a wake's turn timeout) | delivery; scheduler | taken atomically |
| ``P:due:soon`` | list: at most one ``1``: an entry due within a second was scheduled; a sleeping scheduler wakes (BLPOP) | delivery (schedule) | cut to one; popped by the scheduler |
| ``P:sweep`` | string: a scheduler claimed the backlog sweep (SET NX PX) | scheduler | TTL (sweep interval) |
| ``P:sweep:expiry`` | string: a scheduler claimed the receipts' expiry pass (SET NX PX) | scheduler | TTL (a minute) |
| ``P:sweep:compact`` | string: a scheduler claimed the short streams' compaction pass (SET NX PX) | scheduler (bus/store/compaction.py) | TTL (a minute) |
| ``P:workers`` | set: names that keep a heartbeat (hosts' workers, ``scheduler``) | worker, scheduler | a retired host's names taken out by ``inbox host forget`` (bus/store/host_records.py, with its other keys) |
| ``P:beat:<name>`` | hash: pid, started, beat (ms), progress (ms), done, starting (ms: its worker is being started, written by ``inbox up``'s supervisor and the worker's init): a host's worker's heartbeat (name: the host) or a host's scheduler's (``scheduler.<host>``) | worker, scheduler, supervisor | deleted by ``inbox host forget`` |
| ``P:hostclaim:<host>`` | hash: floor (``<machine>\t<home>``), pid, since, beat (ms): the floor that serves the host; a worker of another floor is refused (bus/telemetry/host_floor.py, host_claim.lua) | the serving worker, every beat | TTL 10 s, renewed every beat; deleted at a clean stop |
| ``P:{sid}:subs`` | hash: durable subscription name → ``<the last events id it took of the session>|<ms of its last use>`` (bus/services/durable_watch.py); while one was used within ``INBOX_SUB_IDLE_S`` the session's events are kept | a durable subscriber | deleted with ``--reset``; dropped by the compaction pass once none is in use (events_quiet.lua) |
| ``P:sub:<name>`` | hash: created (ms): a durable subscription (bus/services/durable_watch.py); a reader's own (MCP, the gateway) is named ``<reader>/<name>`` | a durable subscriber | deleted with ``--reset``; expires ``INBOX_SUB_IDLE_S`` after its last use |
| ``P:{sid}:rsubs`` | zset: the reader's own subscription names → last use (ms); at most ``INBOX_SUB_MAX`` | a reader's watch (MCP, the gateway; sub_claim.lua) | idle names dropped after ``INBOX_SUB_IDLE_S``; expires with them |
| ``P:{hs:<skeleton>}:skel`` | hash: session id → "" for the sessions whose handle is not ASCII, by the handle's confusable skeleton (bus.trust.rules.skeleton) | session open | - |
| ``P:member_folds`` | hash: a member's ``workspace:name`` folded (bus.trust.rules.handle_fold) → ``workspace/name``: handles folding alike are reserved | member add | - |
| ``P:data`` | hash: version (the data version the store's keys are in, bus.store.data_version), release (the last release that upgraded it), at (ms), by (host): a host whose code reads an older version refuses to start | ``inbox up`` / ``inbox upgrade`` (bus/ops/upgrade.py) | - |
| ``P:data:lock`` | string: the token of the host upgrading the data (SET NX PX): one host migrates at a time | ``inbox up`` / ``inbox upgrade`` | TTL 60 s, renewed while it works |
| ``P:memory`` | hash: server setting → JSON of the scheduler's last outcome (want, found, state, why, at; bus/store/server_memory.py) | scheduler, once a minute | - |
| ``P:hostclaim:<host>:refused`` | hash: floor, pid, at (ms), holder, holder_pid: the last worker refused the host | a refused worker | TTL 1 hour |
| ``P:{kick:<host>}:list`` | list: session ids whose delivery a loop of the host's workers runs (``INBOX_KICK=list``, bus/delivery/kick_list.py) | dispatch (kick_push.lua) | popped by the loops; no more pushes past 10,000 |
| ``P:{kick:<host>}:alive`` | string: a delivery loop of the host is running | each loop, every second | TTL 3 s |
| ``P:{kick:<host>}:taken:<loop>`` | list: the kicks one delivery loop took and is delivering | the loop's pop (BLMOVE, kick_take.lua) | emptied after its batch; a dead loop's put back (kick_reclaim.lua) |
| ``P:{kick:<host>}:loops`` | hash: loop id → its last beat (Redis ms) | each loop, every second | a dead loop's field goes with its taken kicks |
| ``P:celery:<queue>`` | list: Celery's broker queue (``host.<H>``, ``inbox``), read for its depth | Celery (kombu) | - |
| ``P:{thr}:meta`` (typed requests) | hash fields origin, recipient (session ids), offered_by (sender or recipient, only in OFFERED), windows (JSON list) | request, decide.lua | - |
| ``P:{sid}:items`` | hash: item key → item JSON (title, text, status, answer, revision, ...) | item post/settle, item_update.lua | - |
| ``P:{sid}:item:<key>:thread`` | list: the item's thread entries JSON (member or agent, text, files), oldest first | item write, reply_inbox (item_update.lua) | - |
| ``P:{sid}:rc:<id>`` | hash: the sender's receipt of a *bounced* message addressed to ``sid`` (no registered session, so no prune of its ``ids``); it gives way to one in ``ids`` when the id is later stored: from, from_session, thread, reason (the id and ``to`` are the key's), and the ms of each state reached (stored, noticed, read, answered, withdrawn, retracted, bounced, expired) | send (receipt_open.lua), every transition (receipt_mark.lua) | TTL 8 days from its last transition by default (7 days, or ``INBOX_EXPIRE_S`` plus a day when longer) |
| ``P:{sid}:outbox`` | zset: ``<recipient>|<id>`` → sent µs, the messages ``sid`` sent | send | newest 10,000, none past 7 days |
| ``P:{ws:<workspace>}:members`` | hash: member name → ``active`` or ``removed`` (a tombstone: the account is gone) | member add/remove | - |
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

from bus.core.errors import BadInput
from bus.core.ids import MESSAGE_ID_PATTERN, check_session_id

THREAD_PREFIX = "thr_"
ITEM_KEY_PATTERN = r"^[A-Za-z0-9._:-]{1,200}$"
_ITEM_KEY_RE = re.compile(ITEM_KEY_PATTERN)
_MESSAGE_ID_RE = re.compile(MESSAGE_ID_PATTERN)


def check_item_key(key: object) -> str:
    """An item key, before it becomes part of a Redis key or a directory name."""
    if not isinstance(key, str) or not _ITEM_KEY_RE.fullmatch(key) or key in (".", ".."):
        raise BadInput(f"invalid item key {repr(key)[:60]}: must match {ITEM_KEY_PATTERN}")
    return key


# How long a send answer is kept for its resends (``ids``), and with it the message id's
# session in the receipt index and the sender's ``outbox`` entry: one rule, one constant.
IDS_KEEP_DAYS = 7
DAY_MS = 86_400_000
IDS_KEEP_MS = IDS_KEEP_DAYS * DAY_MS

RECEIPT_FIELD = "~"  # no message id has it: MESSAGE_ID_PATTERN


def receipt_field(msg_id: str) -> str:
    """The ``ids`` hash field holding a stored message's receipt (beside its answer)."""
    if not _MESSAGE_ID_RE.fullmatch(msg_id):
        raise BadInput(f"invalid message id {msg_id[:60]!r}: must match {MESSAGE_ID_PATTERN}")
    return RECEIPT_FIELD + msg_id


REPLY_CURSOR_FIELD = "rd:"  # no other field of a thread's record starts so


def reply_cursor_field(sid: str) -> str:
    """The thread record's field holding the log id up to which ``sid``'s replies marked
    what it got in the thread read (``thread_tail.lua``)."""
    check_session_id(sid)
    return REPLY_CURSOR_FIELD + sid


def is_thread_id(thread: str) -> bool:
    """Whether ``thread`` may name a thread's keys (``thr_`` and letters or digits)."""
    return thread.startswith(THREAD_PREFIX) and thread[4:].isalnum()


def _host(host: str) -> str:
    if not host or len(host) > 300 or any(c in host for c in "{}\n\r\0 "):
        raise ValueError(f"bad host name {host!r}")
    return host


class Keys:
    """Builds keys for one prefix; every method validates what becomes part of a key."""

    def __init__(self, prefix: str = "inbox") -> None:
        if not prefix or any(c in prefix for c in "{} \n"):
            raise ValueError(f"bad key prefix {prefix!r}")
        self.prefix = prefix

    def s(self, sid: str, name: str) -> str:
        """A key in session ``sid``'s slot."""
        check_session_id(sid)
        return f"{self.prefix}:{{{sid}}}:{name}"

    def s_many(self, sid: str, names: Iterable[str]) -> list[str]:
        """:meth:`s` for each of ``names`` (``sid`` checked once: a batch's keys)."""
        check_session_id(sid)
        base = f"{self.prefix}:{{{sid}}}:"
        return [base + name for name in names]

    def t(self, thread: str, name: str) -> str:
        """A key in thread ``thread``'s slot."""
        if not is_thread_id(thread):
            raise ValueError(f"bad thread id {thread!r}")
        return f"{self.prefix}:{{{thread}}}:{name}"

    def answer(self, sid: str, msg_id: str) -> str:
        return self.s(sid, f"ans:{msg_id}")

    def receipt(self, sid: str, msg_id: str) -> str:
        """A message's receipt, in its recipient's slot (beside the marks it reflects)."""
        if not _MESSAGE_ID_RE.fullmatch(msg_id):
            raise BadInput(f"invalid message id {msg_id[:60]!r}: must match {MESSAGE_ID_PATTERN}")
        return self.s(sid, f"rc:{msg_id}")

    def receipts(self, sid: str, msg_ids: list[str]) -> list[str]:
        """:meth:`receipt` of each of ``msg_ids`` (a batch's, one receiver's)."""
        base = self.s(sid, "rc:")
        for msg_id in msg_ids:
            if not _MESSAGE_ID_RE.fullmatch(msg_id):
                raise BadInput(
                    f"invalid message id {msg_id[:60]!r}: must match {MESSAGE_ID_PATTERN}"
                )
        return [base + msg_id for msg_id in msg_ids]

    def outbox(self, sid: str) -> str:
        """The messages ``sid`` sent, in the sender's slot."""
        return self.s(sid, "outbox")

    def handle_map(self, handle: str) -> str:
        """The sessions that carry ``handle``, as hash fields (a small hash is a listpack;
        a set of strings is a table, several times its size, before Redis 7.2)."""
        if any(c in handle for c in "{}\n\r\0") or len(handle) > 300:
            raise ValueError(f"bad handle {handle!r}")
        return f"{self.prefix}:{{h:{handle}}}:sidh"

    def skeleton_map(self, skeleton: str) -> str:
        """The sessions whose handle is not ASCII, by the handle's confusable skeleton
        (bus.trust.rules.skeleton), as hash fields: a look-alike of a live handle is found
        by its skeleton."""
        self.handle_map(skeleton)  # the same checks
        return f"{self.prefix}:{{hs:{skeleton}}}:skel"

    @property
    def member_folds(self) -> str:
        """Every member's ``workspace:name`` folded (bus.trust.rules.handle_fold) →
        ``workspace/name``: a session handle that folds alike is reserved."""
        return f"{self.prefix}:member_folds"

    def reader_subs(self, reader: str) -> str:
        """A reader's durable subscriptions (MCP, the gateway): zset name → last use ms."""
        return self.s(reader, "rsubs")

    def bucket(self, sender: str) -> str:
        """A sender's send-rate bucket; ``sender`` (a token subject, session or handle,
        self-reported without a secret) is hashed, so no label can shape a key."""
        digest = hashlib.sha256(sender.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        return f"{self.prefix}:{{snd:{digest}}}:bucket"

    def rcpt_bucket(self, day: int, bucket: int) -> str:
        """Message id -> receiver for the ids stored on ``day`` (days since the epoch, UTC)
        whose hash falls in ``bucket`` (bus.store.receipt_index); a bucket's days share its
        slot, so a lookup of an id reads every day kept on one node."""
        return f"{self.prefix}:{{rc:{int(bucket)}}}:rcpt:{int(day)}"

    def rcpt_bucket_day_first(self, day: int, bucket: int) -> str:
        """The name a bucket had when each day of it had a slot of its own: moved into
        :meth:`rcpt_bucket` once (:func:`bus.store.receipt_index.move_day_first`)."""
        return f"{self.prefix}:{{rc:{int(day)}:{int(bucket)}}}:rcpt"

    @property
    def rcpt_moved(self) -> str:
        return f"{self.prefix}:rcpt:moved"

    @property
    def sessions(self) -> str:
        return f"{self.prefix}:sessions"

    def lanes(self, parent: str) -> str:
        """The sessions opened with ``parent`` as their parent, in the parent's slot."""
        return self.s(parent, "lanes")

    @property
    def lanes_indexed(self) -> str:
        return f"{self.prefix}:lanes:indexed"

    @property
    def revoked(self) -> str:
        return f"{self.prefix}:revoked"

    @property
    def metrics(self) -> str:
        return f"{self.prefix}:metrics"

    @property
    def latency(self) -> str:
        return f"{self.prefix}:latency"

    @property
    def due(self) -> str:
        return f"{self.prefix}:due"

    @property
    def due_taker(self) -> str:
        """The scheduler that takes due entries now (``take_due.lua``). Its hash tag is
        :attr:`due`'s whole name, so both sit in one slot (a key without a tag is hashed
        whole)."""
        return f"{{{self.prefix}:due}}:taker"

    @property
    def due_soon(self) -> str:
        return f"{self.prefix}:due:soon"

    @property
    def sweep(self) -> str:
        return f"{self.prefix}:sweep"

    @property
    def expiry_sweep(self) -> str:
        return f"{self.prefix}:sweep:expiry"

    @property
    def compact_sweep(self) -> str:
        return f"{self.prefix}:sweep:compact"

    @property
    def workers(self) -> str:
        """The set of names with a heartbeat (each host's worker, the scheduler)."""
        return f"{self.prefix}:workers"

    def beat(self, name: str) -> str:
        """The heartbeat of host ``name``'s worker (or of the ``scheduler``)."""
        check_session_id(name, "host name")
        return f"{self.prefix}:beat:{name}"

    def sub(self, name: str) -> str:
        """A durable subscription's own record (bus.services.durable_watch). A name is a
        session-id-like word, or a reader's own ``<reader>/<name>`` (:meth:`reader_sub`):
        ``/`` is in no session id, so two readers' names never meet."""
        reader, slash, own = name.partition("/")
        if slash:
            check_session_id(reader, "subscription reader")
            check_session_id(own, "subscription name")
        else:
            check_session_id(name, "subscription name")
        return f"{self.prefix}:sub:{name}"

    @staticmethod
    def reader_sub(reader: str, name: str) -> str:
        """The stored name of ``reader``'s own subscription ``name``: ``<reader>/<name>``
        (a session id may hold ``.``, never ``/``, so no other reader's name is the same)."""
        check_session_id(reader)
        check_session_id(name, "subscription name")
        return f"{reader}/{name}"

    @property
    def data(self) -> str:
        """The version of the data the store keeps (bus.store.data_version)."""
        return f"{self.prefix}:data"

    @property
    def data_lock(self) -> str:
        """Held by the one host upgrading the store's data."""
        return f"{self.prefix}:data:lock"

    def sub_pattern(self) -> str:
        """A SCAN pattern matching every durable subscription's record (:meth:`sub`)."""
        return f"{self.prefix}:sub:*"

    def members_pattern(self) -> str:
        """A SCAN pattern matching every workspace's members (:meth:`members`)."""
        return f"{self.prefix}:{{ws:*}}:members"

    def members_workspace(self, key: str) -> str | None:
        """The workspace whose members key ``key`` is (:meth:`members_pattern`), or None."""
        head, tail = f"{self.prefix}:{{ws:", "}:members"
        if key.startswith(head) and key.endswith(tail):
            return key[len(head) : -len(tail)]
        return None

    @property
    def memory(self) -> str:
        """The scheduler's outcome of the server memory settings (bus.store.server_memory)."""
        return f"{self.prefix}:memory"

    def host_claim(self, host: str) -> str:
        """Which floor (machine and home) serves host ``host`` (bus.telemetry.host_floor)."""
        check_session_id(host, "host name")
        return f"{self.prefix}:hostclaim:{host}"

    def host_refused(self, host: str) -> str:
        """The last worker refused host ``host`` because another floor serves it."""
        return f"{self.host_claim(host)}:refused"

    def kick_list(self, host: str) -> str:
        """The host's kick list (bus.delivery.kick_list): session ids for its delivery loops."""
        return f"{self.prefix}:{{kick:{_host(host)}}}:list"

    def kick_alive(self, host: str) -> str:
        """Set by the host's delivery loops while they run (short TTL)."""
        return f"{self.prefix}:{{kick:{_host(host)}}}:alive"

    def kick_taken(self, host: str, loop: str) -> str:
        """The kicks one delivery loop of the host took (reliable pop, bus.delivery.kick_list)."""
        check_session_id(loop, "kick loop id")
        return f"{self.prefix}:{{kick:{_host(host)}}}:taken:{loop}"

    def kick_loops(self, host: str) -> str:
        """The host's delivery loops and their last beats (bus.delivery.kick_list)."""
        return f"{self.prefix}:{{kick:{_host(host)}}}:loops"

    def celery_queue(self, queue: str) -> str:
        """Celery's broker list for ``queue`` (its ``global_keyprefix`` is ``P:celery:``)."""
        if not re.fullmatch(r"[A-Za-z0-9._-]{1,200}", queue):
            raise ValueError(f"bad queue name {queue!r}")
        return f"{self.prefix}:celery:{queue}"

    def pattern(self) -> str:
        """A SCAN pattern matching every key of this prefix (tests, ``inbox status``)."""
        return f"{self.prefix}:*"

    # -- items and members ---------------------------------------------

    def items(self, sid: str) -> str:
        """The session's items: hash key → item JSON."""
        return self.s(sid, "items")

    def item_thread(self, sid: str, key: str) -> str:
        """One item's thread, in the owning session's slot."""
        return self.s(sid, f"item:{check_item_key(key)}:thread")

    def members(self, workspace: str) -> str:
        """A workspace's members: hash name → active|removed."""
        check_session_id(workspace, "workspace")
        return f"{self.prefix}:{{ws:{workspace}}}:members"

    def member_gens(self, workspace: str) -> str:
        """A workspace's member token generations: hash name → count of removals (a
        member token issued under an older generation is refused)."""
        check_session_id(workspace, "workspace")
        return f"{self.prefix}:{{ws:{workspace}}}:gens"
