"""``inbox drain`` and ``inbox peek`` act on this host's floor: a session whose inbox is not
here is refused, saying where it is, since ``inbox session open`` here would move it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bus.surfaces.refusal import refuse, run

if TYPE_CHECKING:
    from bus.api import Bus


def not_here(sid: str, here: str, home: str, recorded: str | None) -> tuple[str, str]:
    """The refusal's message and hint for a session with no inbox under ``home`` on host
    ``here``; ``recorded`` is the host its record names (None: no record, or Redis did not
    answer)."""
    if recorded is None:
        return (
            f"no session {sid!r} has an inbox here ({home})",
            f"open it with: inbox session open {sid} (same INBOX_HOME and INBOX_HOST)",
        )
    if recorded != here:
        return (
            f"session {sid!r} lives on host {recorded!r}, not on this one ({here!r})",
            f"drain it there (INBOX_HOST={recorded}); `inbox session open {sid}` here would "
            f"move it to {here!r}",
        )
    return (
        f"session {sid!r} is on this host ({here!r}) but has no inbox under {home}",
        "run this with the INBOX_HOME its harness uses",
    )


def local_session(b: Bus, sid: str) -> None:
    """Refuse a session that has no inbox on this host (works with Redis down)."""
    home = b.settings.home
    if run(lambda: b.floor.session_dir(sid)).is_dir():
        return
    message, hint = not_here(sid, b.settings.host, str(home), _recorded_host(b, sid))
    refuse("not_found", message, 1, hint=hint)


def _recorded_host(b: Bus, sid: str) -> str | None:
    """The host the session's record names; None without one or with Redis down."""
    from bus.core.errors import BusError
    from bus.store.redis_errors import CONNECTION_ERRORS  # imports redis: only here

    errors: tuple[type[Exception], ...] = (BusError, *CONNECTION_ERRORS)
    try:
        return b.session(sid).host
    except errors:
        return None


__all__ = ["local_session", "not_here"]
