"""Pure trust rules: label hygiene, handle confusables, wake-command hygiene,
the gateway's Host/Origin rules, and who a token may act as.

Everything here is a pure function with table-driven tests (tests/test_trust.py); the
surfaces call them.
"""

from __future__ import annotations

import ipaddress
import re
import shlex
import unicodedata
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

from bus.core.text import is_format_char

# -- labels ------------------------------------------------------------------------------


def _script(ch: str) -> str | None:
    """The script of a letter by its Unicode name's first word (LATIN, CYRILLIC, ...)."""
    if not ch.isalpha():
        return None
    name = unicodedata.name(ch, "")
    return name.split(" ", 1)[0] if name else "UNKNOWN"


def scripts_of(text: str) -> set[str]:
    """The scripts of the letters in ``text`` (digits and punctuation have none)."""
    return {s for s in (_script(ch) for ch in text) if s}


# Characters that print as nothing (or as a space) but are letters or symbols to Unicode,
# so the category checks below would let them through: the Braille blank, Hangul and
# half-width fillers, Khmer inherent vowels, the Mongolian vowel separator.
_INVISIBLE = frozenset("\u2800\u3164\u115f\u1160\uffa0\u17b4\u17b5\u180e")

# First parts of a handle no session may take: the web operator writes as operator:<name>.
RESERVED_HANDLE_PARTS = frozenset({"operator"})


def handle_problem(handle: str) -> str | None:
    """Why ``handle`` may not be registered, or None.

    Refused: control, format, space-like or invisible characters (invisible in a stamp);
    characters that compatibility normalisation (NFKC) changes, so full-width letters,
    mathematical alphabets, ligatures and superscripts never pass for the plain letters
    they look like; and letters from more than one script in one part (``hа:alice``
    with a Cyrillic ``а`` looks like ``ha:alice``).
    """
    if any(
        unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Zs")
        or is_format_char(ch)
        or ch in _INVISIBLE
        for ch in handle
    ):
        return "contains control, format, space or invisible characters"
    if not handle.isascii() and unicodedata.normalize("NFKC", handle) != handle:
        return "contains look-alike characters (not in NFKC form)"
    for part in handle.split(":"):
        found = scripts_of(part)
        if len(found) > 1:
            return f"mixes scripts ({', '.join(sorted(found))}) in {part!r}"
    return None


def reserved_handle(handle: str) -> str | None:
    """Why ``handle`` is reserved for someone other than a session, or None (the pure
    part: a member's own ``workspace:name`` is checked against the store)."""
    first = handle.partition(":")[0]
    if first.lower() in RESERVED_HANDLE_PARTS:
        return f"{first}:<name> is the web operator's"
    return None


# -- wake commands -------------------------------------------------------------------------

_SHELL_CHARS = re.compile(r"[|&;<>()$`\\\"'*?\[\]#~=%{}\n]")
# Never inherited by a wake command: the server secret, tokens, credentials.
SECRET_ENV = (
    "INBOX_SECRET",
    "INBOX_TOKEN",
    "INBOX_FLOWER_AUTH",
    "INBOX_REDIS_URL",
    "INBOX_BROKER_URL",
)


def wake_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without the bus's secrets: ``INBOX_SECRET``, ``INBOX_TOKEN``, URLs that may
    carry a Redis password, and anything named ``*SECRET*``/``*TOKEN*``/``*PASSWORD*``
    under ``INBOX_``."""
    out = {}
    for k, v in env.items():
        upper = k.upper()
        if upper in SECRET_ENV:
            continue
        if upper.startswith("INBOX_") and any(
            w in upper for w in ("SECRET", "TOKEN", "PASSWORD", "AUTH")
        ):
            continue
        out[k] = v
    return out


def wake_argv(cmd: str) -> tuple[list[str] | str, bool]:
    """How to run ``cmd``: ``(argv, False)`` when it is a plain command line (split with
    shlex, no shell); ``(cmd, True)`` when it uses shell syntax (pipes, redirections,
    variables, quoting), which only a shell can run."""
    if _SHELL_CHARS.search(cmd):
        return cmd, True
    argv = shlex.split(cmd)
    if not argv:
        return cmd, True
    return argv, False


# -- the gateway's Host and Origin ----------------------------------------------------------

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1", "[::1]")


def is_loopback(host: str) -> bool:
    """Whether a bind address is loopback (``127.0.0.0/8``, ``::1``, ``localhost``)."""
    name = host.strip("[]")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def host_name(header: str) -> str:
    """The name in a ``Host`` header, without its port, lower-cased."""
    value = header.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        return value[: end + 1] if end > 0 else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def allowed_hosts(bind: str, configured: Iterable[str] = ()) -> frozenset[str]:
    """The ``Host`` names the gateway answers: the configured list, else loopback names
    plus the address it is bound to."""
    names = {n.strip().lower() for n in configured if n.strip()}
    if names:
        return frozenset(names)
    return frozenset({*LOOPBACK_NAMES, bind.lower(), f"[{bind.lower()}]"})


def host_allowed(header: str | None, allowed: frozenset[str]) -> bool:
    """A request's ``Host`` is one of ``allowed`` ("*" allows any)."""
    if "*" in allowed:
        return True
    if not header:
        return False
    return host_name(header) in allowed


def origin_allowed(origin: str | None, host_header: str | None) -> bool:
    """No ``Origin`` (a non-browser client) or a same-origin one; a cross-site page is refused."""
    if origin is None:
        return True
    if origin == "null" or not host_header:
        return False
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return False
    return parts.netloc.lower() == host_header.strip().lower()


# -- joining a workspace -----------------------------------------------------------------


def join_refusal(
    prior: tuple[str | None, str | None] | None,
    wanted: tuple[str | None, str | None],
    opener: tuple[str, str] | None,
    *,
    auth: bool,
) -> str | None:
    """Why a session open may not set ``wanted`` = (workspace, starter), or None.

    ``prior`` is the registered session's (workspace, starter), None for a new one;
    ``opener`` the verified token's (kind, subject), None without one. A workspace, once
    set, moves only with an operator's token (``workspace_fixed``). With authentication
    on, joining a workspace or naming a starter in it takes an operator's token or the
    token of that workspace's member who is the starter (``token_missing`` without a
    token, ``not_your_workspace`` otherwise); re-registering as registered takes none.
    A member's token serves only such a join, for the sessions its member starts; for
    anything else it is a token that is not the session's (``token_subject``).
    """
    workspace, starter = wanted
    kind, sub = opener or (None, "")
    if prior is not None and prior[0] and workspace != prior[0] and kind != "operator":
        return "workspace_fixed"
    if kind == "member":  # a member's token only puts a session its member starts into W
        if wanted == prior or workspace is None:
            return "token_subject"  # not a join: it never acts as the session
        return None if sub == f"{workspace}/{starter}" else "not_your_workspace"
    if not auth or workspace is None or wanted == prior or kind == "operator":
        return None
    return "token_missing" if kind is None else "not_your_workspace"
