"""What every command module of the CLI calls the library through, imported on first use
(so ``inbox --help`` never pays for the library, pydantic and redis)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bus.surfaces.refusal import run

if TYPE_CHECKING:
    from bus.api import Bus


def connect(**kw: Any) -> Bus:
    """The library's :func:`bus.api.connect`; a bad setting (INBOX_*) is a refusal too."""
    from bus.api import connect as connect_bus

    return run(lambda: connect_bus(**kw))


def check_session_id(sid: object, what: str = "session id") -> str:
    from bus.core.models import check_session_id as check

    return check(sid, what)
