"""Celery tasks: ``send`` (exactly that name), ``inbox.deliver`` and ``inbox.tick``."""

from __future__ import annotations

import atexit
import logging
import os
import sys
from dataclasses import replace
from typing import Any

from celery import Task
from celery.signals import (
    celeryd_after_setup,
    task_postrun,
    worker_init,
    worker_process_init,
    worker_process_shutdown,
    worker_ready,
    worker_shutdown,
)

from bus import BusError, connect
from bus.api import Bus
from bus.core.settings import Settings
from bus.delivery.engine import deliver_many as deliver_batch
from bus.delivery.holder_watch import HolderWatch
from bus.delivery.kick_list import KickLoop
from bus.delivery.scheduler import tick as run_tick
from bus.ops.upgrade import (
    EXIT_DATA_TOO_NEW,
    DataTooNew,
    check_readable,
    consent_lines,
    wake_consents,
)
from bus.store.outage_log import OUTAGE_ERRORS, Outage, waits_out
from bus.telemetry.host_floor import HostFloor, HostTaken, claim_floor
from bus.telemetry.liveness import Heartbeat

from .app import app
from .dispatch import CeleryDispatcher
from .events import FlowerReporter

log = logging.getLogger(__name__)
_bus: Bus | None = None
_beat: Heartbeat | None = None
_holders: HolderWatch | None = None
_outage = Outage("worker", log)
_kick: KickLoop | None = None
_reporter: FlowerReporter | None = None
# The worker's node name (``-n``, expanded), set before the pool forks its processes: the
# kick loops' task events carry it, so Flower counts them under this worker.
_nodename: str | None = None

# Delivery loops per worker process with INBOX_KICK=list (bus.delivery.kick_list): each waits on the
# host's kick list and runs one delivery at a time, so a few overlap their Redis waits.
KICK_THREADS = 4


# How often a worker process writes its delivery counters, unless INBOX_METRICS_FLUSH_S
# says (bus.telemetry.counter_flush): a lone delivery's own counter round trip would be a
# share of its CPU worth saving on a cluster.
METRICS_FLUSH_S = 1.0


def get_bus() -> Bus:
    """One Bus per worker process, built from the environment on first use."""
    global _bus
    if _bus is None:
        # Never the token or session of the shell that started it: a task acts only with
        # what its caller hands it (the send task's ``token``).
        settings = replace(Settings.from_env(), token=None, session=None)
        if settings.metrics_flush_s is None:
            settings = replace(settings, metrics_flush_s=METRICS_FLUSH_S)
        _bus = connect(settings, dispatcher=CeleryDispatcher())
    return _bus


def heartbeat() -> Heartbeat:
    """This process's heartbeat for its host (``P:beat:<host>``)."""
    global _beat
    if _beat is None:
        _beat = Heartbeat(get_bus().delivery, get_bus().settings.host)
    return _beat


_floor: HostFloor | None = None


@worker_init.connect
def _claim_host(**_: Any) -> None:
    """One host, one floor (bus.telemetry.host_floor): the host is claimed before any task is taken;
    another floor's worker holding it ends this one with exit 5."""
    global _floor
    bus = get_bus()
    try:
        check_readable(bus.store)  # a host older than the store's data does not start
        # Said in the worker's own log too, for a worker started without `inbox up`.
        for line in consent_lines(wake_consents(bus.store, bus.settings), "inbox worker"):
            print(line, file=sys.stderr, flush=True)
    except DataTooNew as exc:
        print(f"inbox worker: {exc}", file=sys.stderr, flush=True)
        os._exit(EXIT_DATA_TOO_NEW)
    except Exception as exc:  # the store not answering: the claim below says so
        log.warning("the store's data version could not be read: %s", exc)
    try:
        _floor = claim_floor(bus.store, bus.settings.host, bus.settings.home)
    except HostTaken as exc:
        print(f"inbox worker: {exc}", file=sys.stderr, flush=True)
        os._exit(exc.exit_code)
    atexit.register(_exit_with_floor_code)
    # A worker started without `inbox up` (compose) marks its host starting too, so the
    # host is not called down before its first beat (at worker_ready, once its pool is up).
    try:
        bus.store.schedule.mark_starting(bus.settings.host)
    except OUTAGE_ERRORS:
        pass


def _exit_with_floor_code() -> None:
    # Celery exits 0 after the warm shutdown the floor asked for (home gone: exit 6).
    if _floor is not None:
        _floor.release()
        if _floor.exit_code:
            os._exit(_floor.exit_code)


@worker_ready.connect
def _beat_while_running(**_: Any) -> None:
    global _holders
    heartbeat().start()
    # The sessions of this host whose harness quit without closing them are closed
    # (bus.delivery.holder_watch), in the worker's main process beside its beat.
    _holders = HolderWatch.of(get_bus().inbox.notices).start()


@worker_shutdown.connect
def _stop_beating(**_: Any) -> None:
    if _beat is not None:
        _beat.stop()
    if _holders is not None:
        _holders.stop()


@celeryd_after_setup.connect
def _remember_nodename(sender: str, **_: Any) -> None:
    global _nodename
    _nodename = sender


@worker_process_init.connect
def _start_kick_loop(**_: Any) -> None:
    """With ``INBOX_KICK=list``, each pool process runs delivery loops on the host's kick
    list (bus.delivery.kick_list), each batch reported to Flower as a task (workers.events);
    Celery's ``inbox.deliver`` stays for the fallback and the sweeps."""
    global _kick, _reporter
    bus = get_bus()
    if bus.settings.kick == "list" and _kick is None:
        if _nodename is not None:
            _reporter = FlowerReporter(app, _nodename).start()
        _kick = KickLoop(
            bus.delivery, threads=KICK_THREADS, on_done=heartbeat().progress, reporter=_reporter
        ).start()


@worker_process_shutdown.connect
def _stop_kick_loop(**_: Any) -> None:
    if _kick is not None:
        _kick.stop()
    if _reporter is not None:
        _reporter.stop()
    if _bus is not None and _bus.metrics.held is not None:
        # The counters held since the last flush (billiard ends a pool process stopped by
        # a signal through this hook).
        _bus.metrics.held.close()


@task_postrun.connect
def _progress(**_: Any) -> None:
    heartbeat().progress()


class SendRefused(Exception):
    """A ``send`` the bus refused: the task's FAILURE, its text ``"<code>: <message>"``
    (the bus's refusal code and message). Celery stores it by module and name, so
    ``celery -A workers result`` rebuilds it from its one argument."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.code, _, self.message = text.partition(": ")

    @classmethod
    def of(cls, error: BusError) -> SendRefused:
        return cls(f"{error.code}: {error}")


@app.task(name="send", ignore_result=False, max_retries=0)
def send(**fields: Any) -> dict[str, Any]:
    """Store and route one message given as wire fields: ``celery call send --kwargs``.

    The answer (message id, thread, receipt state) is the task's result, kept
    ``INBOX_SEND_RESULT_EXPIRES_S`` (``celery -A workers result <task id>``); a refusal
    is the task's FAILURE (:class:`SendRefused`), not retried. With ``INBOX_SECRET`` set
    the sender's ``token`` comes among the fields (the worker has none of its own):
    without one the send is refused ``token_missing``. A ``durability`` field overrides
    ``INBOX_DURABILITY`` for this send (``not_durable`` when it is not met in time)."""
    token = fields.pop("token", None)
    try:
        answer = get_bus().send(fields, token=str(token) if token else None)
    except BusError as exc:
        raise SendRefused.of(exc) from None
    refusal = answer_refusal(answer)
    if refusal is not None:
        raise refusal
    return answer


def answer_refusal(answer: dict[str, Any]) -> SendRefused | None:
    """The refusal a send answer carries (a bounce, as ``inbox send`` reports it:
    ``not_found``; an answer with an ``error``), or None for a stored message."""
    if answer.get("state") == "bounced":
        sid = (answer.get("recipient") or {}).get("session") or ""
        why = str(answer.get("reason") or f"no session {sid!r} is registered")
        return SendRefused(f"not_found: {why}; message {answer.get('id')} is kept as bounced")
    if answer.get("error"):
        return SendRefused(f"{answer['error']}: {answer.get('reason') or answer['error']}")
    return None


@app.task(name="inbox.deliver", bind=True, max_retries=None)
def deliver(self: Task, sid: str) -> dict[str, Any]:
    """Deliver what is queued for one session of this host. When another delivery holds
    the session it takes this one's work over (bus.delivery.engine): no retry, no sleep."""
    return _deliver_one(get_bus(), sid)


class DeliveryFailed(Exception):
    """A delivery task that could not do its work: a FAILURE in Flower, with the reason
    (Redis away, a notice that could not be written). The scheduler's sweep retries it."""


def _deliver_one(bus: Bus, sid: str) -> dict[str, Any]:
    # Redis restarting: one log line per outage; the scheduler's sweep redoes the delivery
    # once it is back (nothing was taken that is not still in the stream).
    try:
        report = bus.deliver_session(sid)  # its counters in one round trip (bus.delivery.engine)
    except Exception as exc:
        if not waits_out(exc):  # Redis away or refusing writes: the sweep redoes it
            raise
        _outage.failed(exc)
        raise DeliveryFailed(f"Redis unavailable, retried by the sweep: {exc}") from exc
    _outage.ok()
    if report.errors:
        raise DeliveryFailed(f"{sid}: " + "; ".join(report.errors))
    return report.to_json()


@app.task(name="inbox.deliver_many")
def deliver_many(sids: list[str]) -> list[dict[str, Any]]:
    """``inbox.deliver`` for many sessions of this host (the scheduler's due wakes, a
    batch's receivers), delivered as one batch (bus.delivery.engine: a few round trips for the lot)."""
    bus = get_bus()
    try:
        reports = deliver_batch(bus.delivery, sids)
    except OUTAGE_ERRORS as exc:  # the sweep redoes them once Redis is back
        _outage.failed(exc)
        raise DeliveryFailed(f"Redis unavailable, retried by the sweep: {exc}") from exc
    _outage.ok()
    errors = [f"{r.session}: {e}" for r in reports for e in r.errors]
    if errors:
        raise DeliveryFailed("; ".join(errors))
    return [report.to_json() for report in reports]


@app.task(name="inbox.tick")
def tick() -> dict[str, Any]:
    """Take due wakes, flushes and retries (atomically) and dispatch their deliveries."""
    return run_tick(get_bus().delivery)
