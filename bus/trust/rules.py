"""Pure trust rules: label hygiene, handle confusables, wake-command hygiene,
the gateway's Host/Origin rules, and who a token may act as.

Everything here is a pure function with table-driven tests (tests/unit/test_trust.py); the
surfaces call them.
"""

from __future__ import annotations

import functools
import ipaddress
import re
import shlex
import unicodedata
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

from bus.core.text import INVISIBLE_FILLERS, is_format_char

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


# Characters that print as nothing but pass the category checks below.
_INVISIBLE = INVISIBLE_FILLERS

# First parts of a handle no session may take: the web operator writes as operator:<name>.
RESERVED_HANDLE_PARTS = frozenset({"operator"})


# Characters that read as a list separator or a dot between names in a notice's sender
# list ("h1:mallory,operator:root" reads as two senders).
HANDLE_SEPARATORS = frozenset(",;\u00b7\u0387\u2022\u2027\u2219\u22c5\u30fb\u3001\uff65")


# Scripts one language writes together (TR39's "highly restrictive" level): Latin with
# Japanese, Chinese or Korean passes; Latin with Cyrillic, Greek or Armenian (whose
# letters read as Latin ones) never does.
_SCRIPTS_WRITTEN_TOGETHER = (
    frozenset({"LATIN", "CJK", "HIRAGANA", "KATAKANA", "KATAKANA-HIRAGANA"}),
    frozenset({"LATIN", "CJK", "BOPOMOFO"}),
    frozenset({"LATIN", "CJK", "HANGUL"}),
)


def handle_problem(handle: str) -> str | None:
    """Why ``handle`` may not be registered, or None.

    Refused: control, format, space-like or invisible characters (invisible in a stamp);
    characters that compatibility normalisation (NFKC) changes, so full-width letters,
    mathematical alphabets, ligatures and superscripts never pass for the plain letters
    they look like; list separators (``,``, ``;``, ``·`` and their kin), which make one
    handle read as two; and letters from more than one script in the whole handle
    (``hа:alice`` with a Cyrillic ``а`` looks like ``ha:alice``, ``һ1:alice`` like
    ``h1:alice``, and ``h1:аре`` like ``h1:ape``), but for the scripts one language
    writes together (Latin with Han and kana, Bopomofo or Hangul).
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
    # The skeleton's too: a look-alike of a comma (U+201A) reads as one.
    seps = sorted({ch for ch in handle + skeleton(handle) if ch in HANDLE_SEPARATORS})
    if seps:
        return f"contains list separators ({' '.join(seps)}), which read as two handles"
    found = scripts_of(handle)
    if len(found) > 1 and not any(found <= ok for ok in _SCRIPTS_WRITTEN_TOGETHER):
        return f"mixes scripts ({', '.join(sorted(found))})"
    return None


@functools.lru_cache(maxsize=4096)
def _prototype(ch: str) -> str:
    """The character ``ch`` is confusable with that stands for it in a skeleton: an ASCII
    look-alike when Unicode's confusables list one (TR39's data, as the
    ``confusable_homoglyphs`` package ships it), else the lowest of ``ch`` and its
    one-character look-alikes; ASCII stays itself."""
    if ch.isascii():
        return ch
    # Imported here: its table is slow to load, and only a session's open needs it.
    from confusable_homoglyphs import confusables

    alikes = [
        a["c"]
        for a in confusables.confusables_data.get(ch, ())
        if len(a["c"]) == 1 and not is_format_char(a["c"])
    ]
    ascii_alikes = sorted(a for a in alikes if a.isascii() and a.isprintable())
    if ascii_alikes:
        return ascii_alikes[0]
    return min([ch, *alikes])


def skeleton(text: str) -> str:
    """``text``'s confusable skeleton (after Unicode TR39): each character replaced by the
    prototype it reads as, so ``һ1:alice`` (Cyrillic ``һ``) and ``h1:alice`` have one
    skeleton. ASCII is its own (two different ASCII handles never share one)."""
    return "".join(_prototype(ch) for ch in unicodedata.normalize("NFKC", text))


def handle_fold(text: str) -> str:
    """``text`` as a reserved name is compared: its skeleton, case-folded, with every
    character that is not a letter or a digit dropped (``ACME``, ``acme.`` and ``аcme``
    all fold to ``acme``)."""
    return "".join(ch for ch in skeleton(text).casefold() if ch.isalnum())


def member_fold(workspace: str, name: str) -> str:
    """A member's handle ``workspace:name`` as a session handle is compared with it:
    each part folded (:func:`handle_fold`)."""
    return f"{handle_fold(workspace)}:{handle_fold(name)}"


def handle_fold_of(handle: str) -> str:
    """A session handle folded as :func:`member_fold` folds a member's."""
    first, _, rest = handle.partition(":")
    return member_fold(first, rest)


def reserved_handle(handle: str) -> str | None:
    """Why ``handle`` is reserved for someone other than a session, or None (the pure
    part: a member's own ``workspace:name`` is checked against the store). The first
    part is compared folded (:func:`handle_fold`): ``Operator:root``, ``operator.:root``
    are the operator's too."""
    first = handle.partition(":")[0]
    if handle_fold(first) in {handle_fold(p) for p in RESERVED_HANDLE_PARTS}:
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


def parent_refusal(
    prior: str | None,
    wanted: str | None,
    opener: tuple[str, str] | None,
    *,
    exists: bool,
    sid: str,
    auth: bool,
) -> str | None:
    """Why a session open may not name ``wanted`` as the session's parent, or None.

    A parent follows the session's whole inbox (its lanes, bus.services.durable_watch),
    so with authentication on an existing session's parent moves (to another, not to
    none) only with the session's own token or an operator's (``parent_fixed``); a new
    session's opener names whom it likes, before anything was sent to it."""
    if not auth or not exists or wanted is None or wanted == prior:
        return None
    kind, sub = opener or (None, "")
    if kind == "operator" or (kind == "session" and sub == sid):
        return None
    return "parent_fixed"
