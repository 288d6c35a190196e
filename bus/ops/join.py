"""Another machine joining this bus: the line ``inbox up`` prints for it, and the store a
joined home remembers.

``inbox up`` on the first machine knows the store's URL; when another machine can reach it
(an address that is not loopback nor a unix socket) it prints the one line to run there:
``INBOX_REDIS_URL='<url>' inbox up`` (the host's name is that machine's own). Across machines the store should
be a TLS one: ``rediss://:PASSWORD@HOST:PORT/0?ssl_ca_certs=CA&ssl_cert_reqs=required``,
which redis-py and Celery (kombu) both read as it is, the broker URL derived from it
(compose/tls has such a Redis and makes its certificates). The embedded engine has no
TLS: it serves another machine only with ``--listen ADDR --redis-port PORT --clear-text``,
and ``inbox up`` then warns that messages and the password cross the network in clear.

A home whose ``inbox up`` was given ``INBOX_REDIS_URL`` keeps it (with ``INBOX_BROKER_URL``
and ``INBOX_HOST`` where given) in ``$INBOX_HOME/store.env``, 0600
(:func:`bus.core.locate.with_joined` reads it back), so every ``inbox`` command there
works without the environment. Deleting that file forgets the store.
"""

from __future__ import annotations

import ipaddress
import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlsplit

from bus.core.locate import JOINED_FILE, JOINED_KEYS
from bus.local.private_files import write_private

if TYPE_CHECKING:
    from bus.core.settings import Settings

TLS_HOW = (
    "for TLS run a TLS Redis (compose/tls/README.md) and start `inbox up` with "
    "INBOX_REDIS_URL=rediss://:PASSWORD@HOST:PORT/0?ssl_ca_certs=CA&ssl_cert_reqs=required"
)


def loopback(host: str) -> bool:
    """Whether ``host`` (a URL's host) names this machine only."""
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def reachable_from_afar(url: str) -> bool:
    """Whether another machine could reach the store at ``url`` (TCP, not loopback)."""
    parts = urlsplit(url)
    return parts.scheme in ("redis", "rediss") and not loopback(parts.hostname or "")


def tls_problem(url: str) -> str | None:
    """Why a ``rediss://`` URL would not check the server it reaches (``None``: it would)."""
    query = dict(parse_qsl(urlsplit(url).query))
    if query.get("ssl_cert_reqs", "").lower() not in ("required", "cert_required"):
        return "it lacks ssl_cert_reqs=required: the server's certificate would not be checked"
    if not query.get("ssl_ca_certs"):
        return "it names no ssl_ca_certs=CA: the server's certificate cannot be checked"
    return None


def join_lines(url: str, *, clear_text: bool) -> tuple[list[str], str]:
    """``(lines to print, warning)`` for the store at ``url``: the join line another
    machine runs (its host name is its own: ``INBOX_HOST`` defaults to it), with how to get
    the CA there, or why there is none; the warning ("" for none) says what is unsafe.
    Pure."""
    if not reachable_from_afar(url):
        return [], ""
    line = f"INBOX_REDIS_URL={shlex.quote(url)} inbox up"
    if urlsplit(url).scheme == "rediss":
        problem = tls_problem(url)
        if problem:
            return [], f"the store's URL does not check its server ({problem})"
        ca = dict(parse_qsl(urlsplit(url).query))["ssl_ca_certs"]
        return [
            f"  join from another machine (copy {ca} there to the same path first):",
            f"    {line}",
        ], ""
    warning = (
        "the store is served in clear text: messages and its password cross the network "
        "unencrypted; " + TLS_HOW
    )
    if not clear_text:
        return [], warning + " (or pass --clear-text to print the join line anyway)"
    return ["  join from another machine (clear text):", f"    {line}"], warning


def remember(home: Path, env: dict[str, str]) -> Path | None:
    """Keep the store settings ``env`` gives (``INBOX_REDIS_URL`` at least) in the home,
    0600, for every later command there; ``None`` when ``env`` names no store. A link
    where the file goes is refused (:class:`bus.local.private_files.LinkRefused`)."""
    if not env.get("INBOX_REDIS_URL"):
        return None
    text = "".join(f"{k}={env[k]}\n" for k in JOINED_KEYS if env.get(k))
    return write_private(home / JOINED_FILE, text)


def check_listen(settings: Settings, *, redis_port: int, listen: str, clear_text: bool) -> None:
    """Refuse (``BadInput``) what ``inbox up --listen`` cannot do: the embedded server
    serves another machine only on a port, with ``--clear-text`` (it has no TLS), and
    never when ``INBOX_REDIS_URL`` names a store of one's own."""
    from bus.core.errors import BadInput

    if not listen:
        return
    if settings.redis_url:
        raise BadInput("--listen serves the embedded store; INBOX_REDIS_URL names another one")
    if not redis_port:
        raise BadInput("--listen needs --redis-port PORT (the port other machines reach)")
    if not clear_text:
        raise BadInput(
            "the embedded store has no TLS: serving it on another address sends messages "
            "and its password in clear text; pass --clear-text to do so anyway, or " + TLS_HOW
        )


def remember_store(settings: Settings) -> Path | None:
    """:func:`remember` of the store ``settings`` name, in their home (the host's name
    only when the environment, or what the home kept, gives one)."""
    from bus.core.locate import joined

    given = os.environ.get("INBOX_HOST") or joined(settings.home).get("INBOX_HOST", "")
    return remember(
        settings.home,
        {
            "INBOX_REDIS_URL": settings.redis_url or "",
            "INBOX_BROKER_URL": settings.broker_url or "",
            "INBOX_HOST": given,
        },
    )


def say_join(url: str, *, clear_text: bool) -> None:
    """Print the join line for the store at ``url`` (stdout), its warning (stderr)."""
    import sys

    lines, warning = join_lines(url, clear_text=clear_text) if url else ([], "")
    if lines:
        print("\n".join(lines), flush=True)
    if warning:
        print(f"inbox up: warning: {warning}", file=sys.stderr, flush=True)


__all__ = [
    "TLS_HOW",
    "check_listen",
    "join_lines",
    "loopback",
    "reachable_from_afar",
    "remember",
    "remember_store",
    "say_join",
    "tls_problem",
]
