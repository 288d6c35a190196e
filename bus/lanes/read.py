"""The read commands' lane: ``status``, ``threads``, ``read``, ``sent``, ``receipt`` and
``read-inbox`` (bus.core.lane_names.READ_COMMANDS) answered without the library.

Importing the library (redis-py and its asyncio, typer, pydantic, rich) costs a read command
most of its time. bus.lanes.entry hands these commands here first: the argv is parsed with
the standard library, the store's own read methods run over a small RESP client
(bus.lanes.lite_store), bus.lanes.read_answers renders their answers, and the JSON printed
is the one the command line prints, byte for byte (tests/integration/cli/test_fast_read.py
runs each command both ways on many states).

Whatever is unusual answers ``None`` and the full command line answers instead, so nothing
a user sees differs: an option this lane does not know, ``--help``, anything the full path
would refuse (a bad id, an unknown session or thread, not the sender), a write the full
path would make (``read --mark-read``, an outbox entry whose receipt aged out), a wait
(``receipt --wait-for``), authentication on
(``INBOX_SECRET``: the full path checks the token), a cluster or TLS URL, Redis not
answering, or any error at all. ``INBOX_FAST_READ=0`` sends every command to the full path.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable

from bus.core.lane_names import durability_level
from bus.core.status_view import HOST_DOWN_S

from .read_answers import FullPath, read, read_inbox, receipt, sent, status, threads

# Not ``typing.TYPE_CHECKING``: importing typing alone costs the lane several ms.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

OFF_VAR = "INBOX_FAST_READ"

# -- argv ---------------------------------------------------------------------------------

# Per command: its positional arguments, and its options: "value" (it takes one) or
# "full" (the full path answers when it is given).
_ARGV: dict[str, tuple[int, dict[str, str]]] = {
    "status": (0, {}),
    "threads": (1, {}),
    "read": (2, {"--mark-read": "full"}),
    "sent": (1, {"--state": "value", "--limit": "value"}),
    "receipt": (1, {"--by": "value", "--wait-for": "full", "--timeout": "full"}),
    "read-inbox": (1, {}),
}


def parse(argv: list[str]) -> tuple[str, list[str], dict[str, str]] | None:
    """``(command, arguments, options)`` when the lane can answer ``argv``, else None."""
    if not argv or argv[0] not in _ARGV:
        return None
    count, known = _ARGV[argv[0]]
    args: list[str] = []
    opts: dict[str, str] = {}
    rest = iter(argv[1:])
    for word in rest:
        if not word.startswith("-"):
            args.append(word)
            continue
        name, eq, value = word.partition("=")
        kind = known.get(name)
        if kind is None or kind == "full" or name in opts:
            return None  # --help, a short option, "--", one the lane does not take
        if kind == "value" and not eq:
            value = next(rest, "")
        if kind == "value" and (not value or value.startswith("-")):
            return None
        opts[name] = value
    if len(args) != count:
        return None
    return argv[0], args, opts


def _limit(raw: str | None) -> int:
    if raw is None:
        return 50
    if not (raw.isascii() and raw.isdigit()):
        raise FullPath("a --limit the full path parses")
    return int(raw)


_ANSWER: dict[str, Callable[[Any, Any, list[str], dict[str, str]], dict[str, Any]]] = {
    "status": lambda st, s, a, o: status(st, s),
    "threads": lambda st, s, a, o: threads(st, s, a[0]),
    "read": lambda st, s, a, o: read(st, s, a[0], a[1]),
    "sent": lambda st, s, a, o: sent(st, s, a[0], o.get("--state"), _limit(o.get("--limit"))),
    "receipt": lambda st, s, a, o: receipt(st, s, a[0], o.get("--by")),
    "read-inbox": lambda st, s, a, o: read_inbox(st, s, a[0]),
}


def answer(argv: list[str]) -> int | None:
    """Answer ``inbox ARGV`` here and return its exit code, or None (nothing printed)
    for the full command line to answer."""
    if os.environ.get(OFF_VAR, "").strip().lower() in ("0", "false", "no", "off"):
        return None
    parsed = parse(argv)
    if parsed is None:
        return None
    command, args, opts = parsed
    try:
        out = _run(command, args, opts)
    except Exception:  # a refusal, an outage, anything: the full path says it its way
        return None
    if out is None:
        return None
    sys.stdout.write(json.dumps(out, ensure_ascii=False) + "\n")
    sys.stdout.flush()
    return 0


# INBOX_* settings that are not numbers (bus.core.settings.Settings.from_env); any other
# one set to what is not a finite number sends the command to the full path, which
# refuses a bad number in words (or knows a setting this lane does not).
_TEXT_SETTINGS = (
    "INBOX_HOME", "INBOX_HOST", "INBOX_REDIS_URL", "INBOX_BROKER_URL", "INBOX_BROKER_MASTER_NAME",
    "INBOX_SESSION", "INBOX_AGENT_INBOX", "INBOX_TOKEN", "INBOX_KEY_PREFIX", "INBOX_UI_URL",
    "INBOX_ALLOWED_HOSTS", "INBOX_KICK", "INBOX_MEMORY_SETTINGS", "INBOX_DISPATCHER",
    "INBOX_HANDLE", "INBOX_SANDBOX_ROOT", "INBOX_FLOWER_AUTH", "INBOX_DURABILITY", OFF_VAR,
)  # fmt: skip


class Place:
    """What the lane reads of ``Settings.from_env()`` (the same values: a test holds them
    equal); None from :meth:`of` where the full path reads more (a secret, a cluster)."""

    def __init__(self, env: dict[str, str] | os._Environ[str]) -> None:
        from bus.core.locate import default_home, default_host, with_joined

        env = with_joined(dict(env))  # a home that joined a store remembers it
        self.home = default_home(env)
        self.host = env.get("INBOX_HOST") or default_host()
        self.redis_url = env.get("INBOX_REDIS_URL") or None
        self.session = env.get("INBOX_SESSION") or None
        self.key_prefix = env.get("INBOX_KEY_PREFIX") or "inbox"
        self.stale_s = float(env.get("INBOX_STALE_S") or 3600.0)
        self.host_down_s = float(env.get("INBOX_HOST_DOWN_S") or HOST_DOWN_S)

    @classmethod
    def of(cls, env: dict[str, str] | os._Environ[str]) -> Place | None:
        if env.get("INBOX_SECRET") or env.get("INBOX_REDIS_CLUSTER"):
            return None  # tokens are checked on the full path; a cluster needs its client
        level = env.get("INBOX_DURABILITY") or ""
        if level.strip() and durability_level(level) is None:
            return None  # the full path refuses it in words
        if float(env.get("INBOX_HOST_DOWN_S") or HOST_DOWN_S) <= 0:
            return None  # as the full path, which refuses it in words (ValueError too)
        for name, value in env.items():
            if name.startswith("INBOX_") and value and name not in _TEXT_SETTINGS:
                number = float(value)  # ValueError: the full path refuses it in words
                if number != number or number in (float("inf"), float("-inf")):
                    return None
        return cls(env)

    def store_url(self) -> str:
        """``Settings.store_url``: ``INBOX_REDIS_URL``, else the embedded server's socket."""
        from bus.core.locate import embedded_url

        return self.redis_url or embedded_url(self.home)


def spoken(url: str) -> bool:
    """Whether the small client connects to ``url`` as redis-py does: a user needs a
    password (redis-py sends ``AUTH user ""``), and no query but a unix socket's ``db``."""
    from urllib.parse import parse_qsl, urlsplit

    parts = urlsplit(url)
    if parts.username and parts.password is None:
        return False
    query = [k for k, _v in parse_qsl(parts.query, keep_blank_values=True)]
    return not query or (parts.scheme == "unix" and query == ["db"])


CONNECT_TIMEOUT_S = 2.0  # a slow Redis: the full path answers (and waits as it waits)


def _run(command: str, args: list[str], opts: dict[str, str]) -> dict[str, Any] | None:
    from bus.store.keys import Keys

    from . import resp
    from .lite_store import LiteStore

    place = Place.of(os.environ)
    if place is None:
        return None
    url = place.store_url()
    if not spoken(url):
        return None
    conn = resp.connect(url, timeout=CONNECT_TIMEOUT_S)
    if not isinstance(conn, resp.Connection):
        return None  # TLS, a URL this client does not speak
    conn.errors = "strict"
    try:
        return _ANSWER[command](LiteStore(conn, Keys(place.key_prefix)), place, args, opts)
    finally:
        conn.close()


__all__ = ["OFF_VAR", "Place", "answer", "parse", "spoken"]
