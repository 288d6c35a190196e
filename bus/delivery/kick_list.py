"""The kick list: a delivery kick without the Celery hop (``INBOX_KICK=list``).

With Celery, a kick is a task: kombu publishes it, the worker's consumer reads it and the
prefork pool pipes it to a child, three hops before the delivery starts (their cost:
bench/README.md).
With the kick list, the dispatcher pushes the session id onto the host's list
(``P:{kick:<host>}:list``, one round trip) and a delivery loop in each worker process,
blocked on BLPOP, takes the kicks waiting (up to ``POP_MAX``) and delivers their sessions
as one batch (bus.delivery.engine: the same steps as the ``inbox.deliver`` task, a few round trips
for the lot).

Celery stays the fallback. A push is refused when no loop of the host has said it is
alive in the last few seconds (``P:{kick:<host>}:alive``) or the list is full; the kick
then goes to Celery as before. A pop is reliable: the kicks a loop takes move to its own
taken list (BLMOVE, ``kick_take.lua``) until its batch is delivered, and each loop beats;
once a loop's beat is ``STALE_MS`` old (its process killed) a live loop of the host puts
its taken kicks back on the list (``kick_reclaim.lua``), so they are delivered within a
few seconds, not left to the dispatch flag's lapse and the scheduler's backlog sweep
(which still cover a host with no live loop at all).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bus.core import faults
from bus.store.outage_log import OUTAGE_ERRORS, Outage, waits_out

from .dispatch import Dispatcher, request_many
from .engine import deliver_many
from .host import DeliveryHost
from .notice import Finisher
from .report import WorkReporter, works_of

if TYPE_CHECKING:
    from bus.store.kick import SentWait
    from bus.store.store import Store

log = logging.getLogger(__name__)

# A loop's BLPOP waits this long at most, then says again that it is alive.
BLOCK_S = 1.0
# The loops' liveness key lives this long: a host whose loops all died sends its kicks to
# Celery again within it.
ALIVE_MS = 3000
# Each loop beats this often (it waits on the list at most BLOCK_S between beats); a loop
# with no beat for STALE_MS is dead (its process killed): a live loop of the host puts the
# kicks it took back on the list (kick_reclaim.lua). A live loop delivering a long batch
# may look dead too: its kicks are then delivered twice, which a delivery allows (it
# decides from the stored state, under the session's lock).
BEAT_S = 0.5
STALE_MS = 2500
# A loop of a process whose listening loop waits on the list waits this long (or until
# stopped) before it looks again: the listening loop looks at the list itself after each
# kick it heard, so the others stay still (one ``kick_take`` a lone kick). They hold no
# kicks meanwhile, so their beats may lapse (a reclaim finds nothing taken).
LISTEN_WAIT_S = 5.0
# Kicks one loop takes at once and delivers as one batch (bus.delivery.engine): a burst of wakes or
# arrivals costs a few round trips per batch, not a few per session.
POP_MAX = 64
# Waits between tries while Redis is away (growing to the last).
RETRY_S = (0.1, 0.2, 0.5, 1.0)


class ListDispatcher:
    """Kicks onto the host's kick list when a loop of it is alive, else ``fallback``."""

    def __init__(self, store: Callable[[], Store], fallback: Dispatcher) -> None:
        self._store = store
        self.fallback = fallback

    def __getattr__(self, name: str) -> Any:
        # The wrapped dispatcher's own parts (a RecordingDispatcher's calls, Celery's app).
        if name == "fallback":
            raise AttributeError(name)
        return getattr(self.fallback, name)

    def _push(self, host: str, sids: list[str]) -> bool:
        try:
            return self._store().delivery.push_kicks(host, sids)
        except OUTAGE_ERRORS as exc:  # Redis away: the fallback tries (or fails) its way
            log.debug("kick list unavailable (%s); dispatching through the fallback", exc)
            return False

    def request(self, host: str, sid: str) -> None:
        if not self._push(host, [sid]):
            self.fallback.request(host, sid)

    def request_many(self, host: str, sids: list[str]) -> None:
        if sids and not self._push(host, sids):
            request_many(self.fallback, host, sids)


class KickLoop:
    """Delivery loops of one worker process: each pops a kick and delivers its session."""

    def __init__(
        self,
        bus: DeliveryHost,
        *,
        threads: int = 1,
        on_done: Callable[[], Any] | None = None,
        reporter: WorkReporter | None = None,
    ) -> None:
        self.bus = bus
        self.host = bus.settings.host
        self.threads = threads
        self.on_done = on_done
        # Told what each batch did (workers.events: Flower's tasks), or nobody.
        self.reporter = reporter
        self.stop_event = threading.Event()
        self._outage = Outage("kick loop", log)
        self._alive_at = 0.0
        self._alive_lock = threading.Lock()
        self._running: list[threading.Thread] = []
        # One batch at a time per process: the process's loops share one GIL, and two
        # batches interleaved by it cost more CPU a session than one after the other
        # (bench/README.md); the kicks left on the list go to the host's other processes
        # meanwhile. A lone kick (BLMOVE) is delivered outside it.
        self._gate = threading.Lock()
        # One loop of the process waits on the list (BLMOVE) at a time, and delivers what it
        # heard before another listens: a burst pushed onto a list that every loop waited
        # on was delivered first as one lone kick a loop (each costing several times a
        # batched session's CPU), then in batches.
        self._listen = threading.Lock()
        # Kicks the listening loop has heard: a loop that looked at the list before the
        # last one was heard looks again instead of listening (see _pop).
        self._heard_n = 0
        # The loop that listened last: it listens again without a look at the list first.
        self._listener: str | None = None

    def start(self) -> KickLoop:
        # The lazy parts are built here, once, not raced by the threads.
        self.bus.store, self.bus.metrics, self.bus.dispatcher  # noqa: B018
        for n in range(self.threads):
            t = threading.Thread(target=self.run, args=(n,), name=f"kick-{n}", daemon=True)
            t.start()
            self._running.append(t)
        log.info("%d kick loops running for host %s", self.threads, self.host)
        return self

    def stop(self, timeout: float = BLOCK_S + 1) -> None:
        self.stop_event.set()
        for t in self._running:
            t.join(timeout)

    def _reclaim(self, store: Store) -> None:
        """Once a second per process: dead loops' taken kicks back on the list."""
        now = time.monotonic()
        with self._alive_lock:
            if now - self._alive_at < BLOCK_S:
                return
            self._alive_at = now
        moved = store.delivery.reclaim_kicks(self.host, STALE_MS)
        if moved:
            log.info("put %d kicks of dead delivery loops back on the list", moved)

    def run(self, n: int = 0) -> None:
        """Pop and deliver until stopped; Redis going away only pauses it."""
        store = self.bus.store
        loop = f"{os.getpid()}-{n}-{secrets.token_hex(3)}"
        client: Any = None
        pool: Any = None
        fails = 0
        beat_at = float("-inf")
        undone: list[str] = []  # taken, not delivered (Redis went away): again first
        # The taken list holds kicks already delivered: the next take empties it in its
        # own call (kick_take.lua), or _done does when no take follows.
        delivered = False
        # A lone delivery's notice records and this loop's next wait, written on its
        # connection straight after the listener's ack; their replies read next.
        ahead = _Ahead()
        while not self.stop_event.is_set():
            try:
                if client is None or ahead.broken:
                    if pool is not None:
                        pool.disconnect()
                    client, pool = store.delivery.kick_client(
                        BLOCK_S, f"inbox-kick:{self.host}:{loop}"
                    )
                    ahead = _Ahead()  # a new connection: perhaps a restarted server
                if time.monotonic() - beat_at >= BEAT_S:
                    store.delivery.kick_beat(self.host, loop, ALIVE_MS)
                    beat_at = time.monotonic()
                    self._reclaim(store)
                held: threading.Lock | None = None
                if undone:
                    sids = undone
                elif ahead.sent is not None:
                    # Its wait is already out, under the listening lock this loop holds.
                    sids, held = self._read_ahead(store, loop, ahead)
                    delivered = False  # the write emptied the taken list first
                else:
                    sids, held, took = self._pop(
                        store, client, loop, delivered, self._listener == loop
                    )
                    delivered = delivered and not took
                    if delivered and not sids:
                        self._done(store, loop)
                        delivered = False
                self._outage.ok()
                fails = 0
            except Exception as exc:
                if not waits_out(exc):  # Redis away or refusing writes: waited out, else a bug
                    raise
                self._outage.failed(exc)
                if ahead.sent is not None:  # its wait is lost with the connection
                    self._listen.release()
                if pool is not None:
                    pool.disconnect()
                client = pool = None
                ahead = _Ahead()
                self.stop_event.wait(RETRY_S[min(fails, len(RETRY_S) - 1)])
                fails += 1
                continue
            if sids:
                # What the listener heard alone: its heard steer's records go with its
                # next wait, in one write (not on a cluster, whose pipelines split by node).
                lone = held is self._listen and len(sids) == 1 and not store.cluster
                try:
                    faults.point("kick:after_pop")
                    defer = self._finisher(store, client, loop, ahead) if lone else None
                    ok = self._deliver(sids, self._beater(store, loop), defer)
                    undone = [] if ok else sids
                finally:
                    # A lone kick's loop looks at the list itself next (one kick_take a
                    # lone kick): the others stay still, not woken to look too. A loop
                    # whose wait is out keeps listening: it reads that wait next.
                    if held is not None and ahead.sent is None:
                        held.release()
                delivered = not undone
        if ahead.sent is not None:
            self._stop_ahead(store, loop, ahead)
        if delivered:
            self._done(store, loop)
        if not undone:
            with contextlib.suppress(*OUTAGE_ERRORS):
                store.delivery.kick_gone(self.host, loop)
        if pool is not None:
            pool.disconnect()

    def _pop(
        self, store: Store, client: Any, loop: str, clear: bool, listener: bool = False
    ) -> tuple[list[str], threading.Lock | None, bool]:
        """``(kicks, held, took)``: the kicks waiting (up to ``POP_MAX``), taken under the
        process's gate, returned with it ``held`` (the batch is delivered under it); none
        waiting, the next one waited for (BLMOVE) by the process's one listening loop and
        returned with the listening lock ``held``: the lone kick is delivered under it, so
        the process's other loops stay still meanwhile (a loop that woke to look at the
        list would cost the lone send's notice its CPU). ``[]`` when another loop holds
        the gate or listens: this loop beats and looks again once that one is done (the
        gate), or :data:`LISTEN_WAIT_S` later (the listening lock). ``clear``: the loop's
        taken list holds delivered kicks, emptied by the take; ``took``: a take ran.
        ``listener``: this loop listened last (it delivered what it heard, or heard
        nothing): it listens again straight away, with no look at the list first (the
        BLMOVE returns at once when kicks came meanwhile, and its round trip says how many
        more wait: a burst is taken with them), so a lone kick costs the list one round
        trip and no script, and a quiet list none but the BLMOVE."""
        if listener and self._listen.acquire(blocking=False):
            return (*self._listen_once(store, client, loop, clear), True)
        if not self._gate.acquire(timeout=BEAT_S):
            return [], None, False
        seen = self._heard_n
        got = _kept_if_any(
            self._gate, lambda: store.delivery.take_kicks(self.host, loop, POP_MAX, clear=clear)
        )
        if got[0]:
            return (*got, True)
        if not self._listen.acquire(blocking=False):
            # Another loop listens, or delivers what it heard, and listens again itself
            # after it (a burst behind its kick goes as a batch): wait (bounded, or until
            # stopped), not poll the list.
            self.stop_event.wait(LISTEN_WAIT_S)
            return [], None, True
        if self._heard_n != seen:
            # The listener heard a kick after this loop's look: a burst may be waiting
            # behind it, which a BLMOVE would take one kick at a time. Look again first.
            self._listen.release()
            return [], None, True
        return (*self._listen_once(store, client, loop, False), True)

    def _listen_once(
        self, store: Store, client: Any, loop: str, clear: bool
    ) -> tuple[list[str], threading.Lock | None]:
        """Under the listening lock (acquired by the caller): the next kick (BLMOVE) and,
        when more wait behind it, as many of them as a batch takes (``kick_take.lua``);
        returned with the lock held, or ``[]`` with it released."""

        self._listener = loop

        def listen() -> list[str]:
            sids, waiting = store.delivery.wait_kick(client, self.host, loop, BLOCK_S, clear=clear)
            if sids and waiting:
                sids += store.delivery.take_kicks(self.host, loop, POP_MAX - 1)
            return sids

        heard = _kept_if_any(self._listen, listen)
        if heard[0]:
            self._heard_n += 1  # under the listening lock: its one writer
        return heard

    def _finisher(self, store: Store, client: Any, loop: str, ahead: _Ahead) -> Finisher:
        """Notices.send's ``defer`` for a lone delivery: its heard steer's records written
        at once on this loop's connection, with the loop's next wait behind them
        (:meth:`~bus.store.kick.KickStore.send_then_wait`), their replies read by
        :meth:`_read_ahead`. The records put a session that must run again (its
        hand-off flag taken, its lock no longer ours) back on the kick list themselves,
        so the wait returns at once with it. A write that fails sends them the usual
        way, and the loop's connection is made again."""

        def finish(finishes: list[dict[str, Any]]) -> list[tuple[bool, bool]]:
            if ahead.sent is not None:  # one wait ahead at a time
                return store.delivery.finish_notices(finishes)
            calls = [
                c for f in finishes for c in store.delivery.finish_calls(**f, kicks_of=self.host)
            ]
            try:
                ahead.sent = store.delivery.send_then_wait(
                    client, self.host, loop, BLOCK_S, calls, load=not ahead.loaded
                )
            except OUTAGE_ERRORS as exc:
                log.debug("kick connection failed (%s); notice records sent apart", exc)
                ahead.broken = True
                return store.delivery.finish_notices(finishes)
            ahead.loaded, ahead.calls = True, calls
            faults.point("kick:after_ahead")
            return [(True, False)] * len(finishes)

        return finish

    def _read_ahead(self, store: Store, loop: str, ahead: _Ahead) -> tuple[list[str], Any]:
        """The replies of the records and wait written ahead, under the listening lock
        this loop still holds: the kicks the wait brought (with as many more as wait
        behind, ``kick_take.lua``), returned with the lock held, or ``[]`` with it
        released. A record the server answered with an error (it lost its script) runs
        again on its own, loaded."""
        sent, calls = ahead.sent, ahead.calls
        assert sent is not None
        ahead.sent, ahead.calls = None, []

        def listen() -> list[str]:
            try:
                sids, waiting, replies = sent.read()
            except OUTAGE_ERRORS:
                ahead.broken = True
                raise
            lost = [c for c, r in zip(calls, replies, strict=True) if isinstance(r, Exception)]
            if lost:
                log.info("notice records answered with an error; sent again, loaded")
                store.run_in_order(lost)
            if sids and waiting:
                sids += store.delivery.take_kicks(self.host, loop, POP_MAX - 1)
            return sids

        heard = _kept_if_any(self._listen, listen)
        if heard[0]:
            self._heard_n += 1
        return heard

    def _stop_ahead(self, store: Store, loop: str, ahead: _Ahead) -> None:
        """Stopping with a wait out: its replies read, and a kick it brought delivered
        (a stopped loop's taken list is nobody's to put back)."""
        try:
            sids, _held = self._read_ahead(store, loop, ahead)
        except OUTAGE_ERRORS as exc:  # the listening lock already released
            self._outage.failed(exc)
            return
        try:
            if sids:
                self._deliver(sids)
        finally:
            if sids:
                self._listen.release()

    def _done(self, store: Store, loop: str) -> None:
        try:
            store.delivery.done_kicks(self.host, loop)
        except OUTAGE_ERRORS as exc:  # left taken: put back once this loop's beat lapses
            self._outage.failed(exc)

    def _beater(self, store: Store, loop: str) -> Callable[[], None]:
        """Progress within a batch: the loop's beat (at most every BEAT_S), so a batch
        longer than STALE_MS (a loaded machine, many recoveries settled) does not
        have its kicks put back and delivered again by another loop; then ``on_done``."""
        beat_at = time.monotonic()

        def progress() -> None:
            nonlocal beat_at
            if time.monotonic() - beat_at >= BEAT_S:
                beat_at = time.monotonic()
                with contextlib.suppress(*OUTAGE_ERRORS):
                    store.delivery.kick_beat(self.host, loop, ALIVE_MS)
            if self.on_done is not None:
                self.on_done()

        return progress

    def _deliver(
        self,
        sids: list[str],
        progress: Callable[[], None] | None = None,
        defer: Finisher | None = None,
    ) -> bool:
        """Deliver ``sids`` as one batch; False when Redis went away first (the loop tries
        them again). ``defer``: sends the heard steers' records (engine.deliver_many)."""
        started, t0 = time.time(), time.perf_counter()
        try:
            reports = deliver_many(self.bus, sids, progress=progress or self.on_done, defer=defer)
        except OUTAGE_ERRORS as exc:
            self._outage.failed(exc)
            self._report_failed(sids, started, t0, f"Redis unavailable, retried: {exc}")
            return False
        # Broad on purpose: one bad delivery must not end the loop; the sweep retries it.
        except Exception as exc:
            if waits_out(exc):  # the store refuses writes: waited out as an outage is
                self._outage.failed(exc)
                self._report_failed(sids, started, t0, f"the store refuses writes: {exc}")
                return False
            log.exception("delivery of %s from the kick list failed", sids)
            self._report_failed(sids, started, t0, f"{type(exc).__name__}: {exc}")
        else:
            if self.reporter is not None:
                self.reporter.done(works_of(reports), started, time.perf_counter() - t0)
        if self.on_done is not None:
            self.on_done()
        return True

    def _report_failed(self, sids: list[str], started: float, t0: float, error: str) -> None:
        if self.reporter is not None:
            self.reporter.failed(sids, started, time.perf_counter() - t0, error)


class _Ahead:
    """A kick loop's records and wait written ahead on its connection (KickLoop._finisher)."""

    def __init__(self) -> None:
        self.sent: SentWait | None = None  # replies not read yet
        self.calls: list[tuple[Any, ...]] = []  # the records among them
        self.loaded = False  # the connection has run their scripts: no sources sent
        self.broken = False  # the connection failed: made again


def _kept_if_any(
    lock: threading.Lock, take: Callable[[], list[str]]
) -> tuple[list[str], threading.Lock | None]:
    """``take()`` under ``lock`` (acquired by the caller): its kicks with the lock still
    held (released after their delivery), or ``[]`` with it released."""
    try:
        sids = take()
    except BaseException:
        lock.release()
        raise
    if sids:
        return sids, lock
    lock.release()
    return [], None


__all__ = ["ALIVE_MS", "BLOCK_S", "POP_MAX", "STALE_MS", "KickLoop", "ListDispatcher"]
