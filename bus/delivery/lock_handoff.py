"""A busy delivery hands its work to the one running, instead of retrying after a sleep.

Deliveries of one session are serialised by its lock. A delivery dispatched while another
holds the lock (a send arrived after the holder cleared the dispatch flag) does not sleep
and retry, which would keep a message waiting behind a delivery that had already
finished: it sets ``P:{sid}:again`` and tries the lock once more; if that fails too it returns
at once. Every delivery, after it unlocks, takes the flag (GETDEL) and runs again if it
was set. No hand-off is lost: the flag is set before the second try, so a holder that
unlocks after that try fails sees the flag. A holder that dies with the flag set would
leave the work to the scheduler's sweep; so a hand-off also puts a ``lease`` kick on the
schedule for when the holder's lease runs out: a dead holder's session is taken over
then (within ``INBOX_LOCK_TTL_S``), and for a live holder it is one empty delivery.
"""

from __future__ import annotations

from bus.core.models import now_ms

from .engine import DeliveryHost, DeliveryReport, deliver_session

# Runs in a row for one session before the rest is dispatched as a fresh task, so one
# busy session cannot hold a worker child forever while others wait.
MAX_RUNS = 20
# After the holder's lease would have run out: a little past it, so the kick finds it free.
LEASE_SLACK_MS = 100


def deliver(bus: DeliveryHost, sid: str) -> DeliveryReport:
    """Deliver ``sid``'s queue; ``busy`` only when the work was handed to a running holder.
    Its counters go to Redis in one round trip at the end (``Metrics.batched``)."""
    with bus.metrics.batched():
        return _deliver(bus, sid)


def _deliver(bus: DeliveryHost, sid: str) -> DeliveryReport:
    store = bus.store
    total = DeliveryReport(session=sid)
    for _run in range(MAX_RUNS):
        report = deliver_session(bus, sid)
        add_report(total, report)
        if report.busy:
            store.ask_again(sid, store.lock_ttl_ms)
            report = deliver_session(bus, sid)
            add_report(total, report)
            if report.busy:
                total.busy = True  # the holder runs again after it unlocks
                store.schedule("lease", sid, now_ms() + store.lock_ttl_ms + LEASE_SLACK_MS)
                return total
        # The flag was taken with the unlock when that went well (report.again).
        again = report.again if report.again is not None else store.take_again(sid)
        if not again:
            return total
    if store.mark_pending(sid):
        info = store.get_session(sid)
        if info is not None:
            bus.dispatcher.deliver(info.host, sid)
    return total


def add_report(total: DeliveryReport, report: DeliveryReport) -> None:
    """Add what ``report``'s run did to ``total``."""
    for name in ("raw", "socket", "file", "skipped", "inbox"):
        setattr(total, name, getattr(total, name) + getattr(report, name))
    total.notices.extend(report.notices)
