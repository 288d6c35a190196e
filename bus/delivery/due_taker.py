"""Which of several schedulers takes the due entries (wakes, flushes, retries).

Every host's ``inbox up`` runs a scheduler, and each slept until the earliest due time:
ten of them woke for every due wake, nine to find it taken (113 takes a second for 12
due entries in a 10-host swarm). One at a time takes them now: the taker claim
(``{P:due}:taker``) is claimed when free and renewed by each take in the same script
(``take_due.lua``); the others look again once the claim could have lapsed, and meanwhile
tick only for the sweeps. A taker killed outright is replaced at once by its own restart
(the same name, :func:`taker_name`), else by another host's within :data:`CLAIM_MS`; one
that stops releases it. Entries are still taken atomically, so two takers in a race (a
paused one coming back, two schedulers of one name) never take one twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bus.store.store import Store

# How long a take holds the claim. The taker takes at least every half second (the
# scheduler's longest sleep), so a slow tick keeps it; a dead one's lapses this soon.
CLAIM_MS = 1500


def taker_name(host: str, home: object) -> str:
    """A scheduler's name in the claim: its host's and home's, the same for its restart
    and its supervisor's spare, which so take the claim at once after a kill (they start
    once the killed one has exited) rather than wait for it to lapse."""
    return f"{host}:{home}"


class Taker:
    """One scheduler's side of the claim: whether it holds it, and its next due time."""

    def __init__(self, name: str, claim_ms: int = CLAIM_MS) -> None:
        self.name = name
        self.claim_ms = claim_ms
        self.holds = False
        # The earliest due time left after this scheduler's last take (its sleep's end).
        self.next_due: int | None = None

    def take(self, store: Store, now_ms: int, limit: int = 500) -> list[tuple[str, str]]:
        """The entries due at ``now_ms`` when this scheduler holds (or gets) the claim;
        ``[]`` while another holds it (with no round trip until it can have lapsed:
        :meth:`~bus.store.schedule.ScheduleStore.take_due_as`)."""
        taken, left_ms, next_due = store.schedule.take_due_as(
            self.name, self.claim_ms, now_ms, limit
        )
        self.holds = left_ms == 0
        self.next_due = next_due if self.holds else None
        return taken

    def release(self, store: Store) -> None:
        """Give the claim up (the scheduler stops): another takes over at its next look."""
        if self.holds:
            store.schedule.release_taker(self.name)
            self.holds = False
