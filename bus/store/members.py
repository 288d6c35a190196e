"""The store's workspace members and revoked tokens: who is a member of which workspace,
under which folded handle, at which token generation, and which token ids are revoked.

A part of :class:`~bus.store.store.Store` (its ``members`` aggregate). Standard library
only: the read lane (:mod:`bus.lanes.lite_store`) mixes it in too. A read of a missing
thing answers empty.
"""

from __future__ import annotations

from .base import StorePart

# Not ``typing.TYPE_CHECKING``: importing typing alone costs the read lane several ms
# (bus.lanes.read imports this module).
TYPE_CHECKING = False
if TYPE_CHECKING:
    pass


class MemberStore(StorePart):
    """Workspace members, their token generations, revoked token ids."""

    def member_status(self, workspace: str, name: str) -> str | None:
        """``active``, ``removed``, or ``None`` (never a member of ``workspace``)."""
        raw = self.r.hget(self.k.members(workspace), name)
        return str(raw) if raw else None

    def set_member(self, workspace: str, name: str, status: str) -> None:
        """Record member ``name``'s status in ``workspace``."""
        self.r.hset(self.k.members(workspace), name, status)

    def index_member_fold(self, fold: str, workspace: str, name: str) -> None:
        """Remember member ``workspace/name`` under its handle folded (``fold``)."""
        self.r.hset(self.k.member_folds, fold, f"{workspace}/{name}")

    def member_by_fold(self, fold: str) -> str | None:
        """The member (``workspace/name``) whose handle folds to ``fold``, if any."""
        raw = self.r.hget(self.k.member_folds, fold)
        return str(raw) if raw else None

    def member_generation(self, workspace: str, name: str) -> int:
        """How many times ``name`` was removed from ``workspace`` (0: never)."""
        return int(self.r.hget(self.k.member_gens(workspace), name) or 0)

    def bump_member_generation(self, workspace: str, name: str) -> int:
        """Move ``name``'s token generation on: tokens issued before are dead."""
        return int(self.r.hincrby(self.k.member_gens(workspace), name, 1))

    def members(self, workspace: str) -> dict[str, str]:
        """Every member of ``workspace`` with its status."""
        return dict(self.r.hgetall(self.k.members(workspace)))

    def is_revoked(self, jti: str) -> bool:
        """Whether token id ``jti`` was revoked."""
        return bool(self.r.sismember(self.k.revoked, jti))

    def revoke(self, jti: str) -> None:
        """Revoke token id ``jti`` for good."""
        self.r.sadd(self.k.revoked, jti)
