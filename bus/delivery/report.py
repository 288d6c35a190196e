"""What one delivery run did (the worker's answer for a session)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from .lease import Lease


@dataclass
class DeliveryReport:
    session: str
    busy: bool = False
    raw: int = 0
    socket: int = 0
    file: int = 0
    skipped: int = 0
    inbox: int = 0
    notices: list[dict[str, Any]] = field(default_factory=list)
    # Why a notice could not be written (put back and retried): the run failed for it.
    errors: list[str] = field(default_factory=list)
    # The same error as the session's last try (its retry backed off): no new failure.
    repeated: list[str] = field(default_factory=list)
    lease: Lease | None = field(default=None, repr=False)
    # The hand-off flag, taken with the unlock (bus.delivery.engine); None: not taken yet.
    again: bool | None = field(default=None, repr=False)

    def still_held(self) -> bool:
        """The fence before a notice is written: the delivery still holds its lease (a
        confirmation within the lease's fresh window answers, see bus.delivery.lease)."""
        return self.lease is None or self.lease.held(fresh=True)

    def to_json(self) -> dict[str, Any]:
        out = self.__dict__.copy()
        out.pop("lease", None)
        out.pop("again", None)
        return out


# The kinds of work a delivery batch shows an operator (a task name each, see
# workers.events): arrivals delivered, idle sessions woken, held FYIs flushed.
WORK_KINDS = ("deliver", "wake", "flush")


@dataclass(frozen=True)
class Work:
    """One kind of work done by one delivery batch: its sessions and what it did."""

    kind: str
    sessions: tuple[str, ...]
    socket: int = 0
    floor: int = 0
    messages: int = 0
    handed_off: int = 0
    # Why its notices could not be written: a failed piece of work.
    errors: tuple[str, ...] = ()

    def result(self) -> dict[str, Any]:
        """What an operator reads as the work's result (Flower's Result column)."""
        out: dict[str, Any] = {
            "sessions": len(self.sessions),
            "notices": {"socket": self.socket, "floor": self.floor},
            "messages": self.messages,
        }
        if self.handed_off:
            out["handed_off"] = self.handed_off
        return out


def work_kind(report: DeliveryReport) -> str:
    """``flush`` when a notice of the run flushed held FYIs, ``wake`` when one woke the
    session, else ``deliver``."""
    kind = "deliver"
    for notice in report.notices:
        if notice.get("wake"):
            if notice.get("reason") == "flush":
                return "flush"
            kind = "wake"
    return kind


def works_of(reports: list[DeliveryReport]) -> list[Work]:
    """A batch's reports grouped by kind (in :data:`WORK_KINDS` order, empty kinds left
    out; a run that sent no notice, failed anew in nothing and handed nothing off is no
    work), the runs that failed apart from the others: the sessions served, notices by the
    way they went, messages they named, errors."""
    grouped: dict[tuple[str, bool], list[DeliveryReport]] = {}
    for report in reports:
        if not (report.notices or report.errors or report.busy):
            # Nothing delivered, nothing failed anew (a look at a floor not yet drained, a
            # failure repeated and backed off): no task an operator need see.
            continue
        grouped.setdefault((work_kind(report), bool(report.errors)), []).append(report)
    works = []
    for kind in WORK_KINDS:
        for failed in (False, True):
            group = grouped.get((kind, failed))
            if not group:
                continue
            notices = [n for r in group for n in r.notices]
            works.append(
                Work(
                    kind=kind,
                    sessions=tuple(r.session for r in group),
                    socket=sum(1 for n in notices if n.get("via") == "socket"),
                    floor=sum(1 for n in notices if n.get("via") != "socket"),
                    messages=sum(int(n.get("messages") or 0) for n in notices),
                    handed_off=sum(1 for r in group if r.busy),
                    errors=tuple(f"{r.session}: {e}" for r in group for e in r.errors),
                )
            )
    return works


class WorkReporter(Protocol):
    """Where a worker's delivery loops say what each batch did (an operator's dashboard:
    workers.events reports them to Flower as Celery task events). Called on the delivery
    loop's thread: it must only record, never wait on the network."""

    def done(self, works: list[Work], started: float, runtime: float) -> None:
        """A batch delivered: ``started`` is its wall-clock start, ``runtime`` seconds;
        a :class:`Work` with ``errors`` failed (its sessions are retried)."""

    def failed(self, sessions: list[str], started: float, runtime: float, error: str) -> None:
        """A batch that raised ``error`` (its sessions are retried)."""
