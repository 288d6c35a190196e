"""The token commands: ``token issue`` and ``token revoke`` (needs INBOX_SECRET).

:func:`register` adds them to the CLI's app (``bus.surfaces.cli.app`` calls it once).
"""

from __future__ import annotations

import typer

from bus.surfaces.refusal import bus_call, emit, fail

from .calls import connect
from .help_panels import OPERATIONS, arg

token_app = typer.Typer(
    help="Signed tokens for senders (needs INBOX_SECRET).", no_args_is_help=True
)


@token_app.command("issue")
def token_issue(
    session: str | None = typer.Option(None, help="bind the token to this session"),
    member: str | None = typer.Option(
        None, help="bind it to this member: WORKSPACE/NAME, or NAME with --workspace"
    ),
    workspace: str | None = typer.Option(None, help="the member's workspace"),
    scopes: str | None = typer.Option(
        None, help="comma-separated: agent:inbox:read,agent:inbox:write,agent:thread:write"
    ),
    ttl: int | None = typer.Option(None, help="seconds until it expires (default: never)"),
    operator: str | None = typer.Option(
        None, help="an operator of the web inbox (sign in at /ui/login?token=...)"
    ),
) -> None:
    """Issue a token; a caller passes it in INBOX_TOKEN."""
    from bus.trust.tokens import SCOPE_OPERATOR

    b = connect()
    if scopes is None and not operator:
        fail("--scopes is required (or --operator NAME)")
    wanted = [s.strip() for s in (scopes or SCOPE_OPERATOR).split(",") if s.strip()]
    if member and workspace and "/" not in member:
        member = f"{workspace}/{member}"
    emit(
        bus_call(
            lambda: b.issue_token(
                session=session, member=member, scopes=wanted, ttl_s=ttl, operator=operator
            )
        )
    )


@token_app.command("revoke")
def token_revoke(token: str = arg("TOKEN", "the token to revoke")) -> None:
    """Revoke a token: every later use is refused."""
    b = connect()
    emit(bus_call(lambda: b.revoke_token(token)))


def register(app: typer.Typer) -> None:
    """Add the ``token`` group to ``app``."""
    app.add_typer(token_app, name="token", rich_help_panel=OPERATIONS)
