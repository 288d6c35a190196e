"""One session's run through the delivery engine's stages, and the steps they share.

A :class:`Run` carries a session's lease, its read, its snapshot and its plan from stage
to stage of :func:`bus.delivery.engine.run_once`. :func:`fence` checks many runs' leases
in one round trip; :func:`steer_likely` guesses a running session's steer before its
snapshot (the steer rule, :func:`bus.core.policy.steers`); :func:`give_back` puts back a
notice the snapshot took for a steer that is not sent; :func:`left_over` says whether an
earlier run left something to settle before the plan.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bus.core import policy
from bus.core.models import SessionInfo
from bus.store.delivery import DeliverySnapshot

from .drain_marks import PENDING_MARKS
from .lease import Lease
from .report import DeliveryReport
from .take import raw_mode

if TYPE_CHECKING:
    from bus.core.clock import Clock
    from bus.store.store import Store

    from .floor import Floor


@dataclass
class Run:
    """One session's run through the stages."""

    sid: str
    lease: Lease
    report: DeliveryReport
    info: SessionInfo | None
    # The read to take next, and its entries' send answers (None: read them first).
    rows: list[tuple[str, dict[str, str]]]
    answers: list[dict[str, Any] | None] | None
    snap: DeliverySnapshot | None = None
    plan: policy.Plan | None = None
    done: bool = False  # its lease released
    rerun: bool = False
    # Its records as kept -> whole, as ingested (the notice reads them back unrestored).
    wholes: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The notice id its snapshot may take into flight (a running session's steer).
    take_nid: str | None = None

    def drop(self, store: Store, clock: Clock) -> None:
        """Its lease lost: nothing more is written, a notice its snapshot took goes back
        (:func:`give_back`), the lock freed if still ours. Its begin cleared the dispatch
        flag and the lock may lapse with nobody taking it: it runs again after the batch
        (the hand-off: delivered, or handed to a holder), not left to the sweep."""
        give_back(store, clock, self)
        self.report.busy = True
        self.lease.release()
        self.done = self.rerun = True


def left_over(
    info: SessionInfo, notice_id: str | None, floor_ids: list[str], marks_waiting: bool
) -> bool:
    """Whether an earlier run left something to settle before the plan: a notice in
    flight (a worker killed mid-notice), notices on the floor not confirmed yet, marks a
    drain made while Redis was down, or a wake whose command never ran."""
    return bool(notice_id or floor_ids or marks_waiting or info.wake_pending)


def fence(store: Store, runs: list[Run]) -> list[Run]:
    """The runs whose leases still stand: fresh ones as they are, the others checked in
    one round trip (as :meth:`~bus.delivery.lease.Lease.held`, for all of them at once)."""
    stale = [r for r in runs if not r.lease.lost and not r.lease.fresh()]
    if stale:
        sent_at = time.monotonic()
        answers = store.delivery.extend_many([(r.sid, r.lease.token) for r in stale])
        for run, ok in zip(stale, answers, strict=True):
            run.lease.confirmed(ok, sent_at)
    return [r for r in runs if not r.lease.lost]


def steer_likely(floor: Floor, inbox_default: bool, sid: str, info: SessionInfo | None) -> bool:
    """Whether a run's plan is likely a running session's steer: the steer rule
    (:func:`bus.core.policy.steers`) on its record as its last read found it, with no
    drain's marks waiting on this host's floor (those are settled first, in the plan
    stage). Its notice is then taken in the snapshot's call where the snapshot's reads
    hold the rule too (``steer_ready`` in parts/snapshot.lua)."""
    if info is None or raw_mode(info, inbox_default):  # no session, or its inbox off
        return False
    facts = policy.SteerFacts(
        state=info.state,
        agent_inbox=True,
        prompt_waiting=info.prompt_waiting,
        wake_pending=bool(info.wake_pending),
        in_flight=False,  # read by the snapshot itself
        unconfirmed=False,
        retry_at=None,
        now_ms=0,
    )
    return policy.steers(facts) and not (floor.session_dir(sid) / PENDING_MARKS).exists()


def give_back(store: Store, clock: Clock, run: Run) -> None:
    """A notice the run's snapshot took into flight for a steer that is not sent in this
    batch (the plan differs, or the lease was lost): its messages back to new."""
    snap = run.snap
    if snap is None or snap.taken is None or run.take_nid is None:
        return
    store.delivery.revert_notice(run.sid, run.take_nid, clock.now_ms(), "the plan sent no steer")
    snap.taken = None


__all__ = ["Run", "fence", "give_back", "left_over", "steer_likely"]
