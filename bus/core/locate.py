"""Where this host's bus is: its home, its host name, and the store's URL.

:class:`bus.core.settings.Settings` finds them here, and so does the read commands' fast
lane (bus.lanes.read), which must find the same Redis without importing the
settings' dataclass machinery: this module imports only ``os``, ``socket``, ``pathlib`` and
``urllib.parse`` (``hashlib`` and bus.local.runtime_dir when a home's socket path is too
long). And how a store URL is shown (:func:`redact`: never its password).
"""

from __future__ import annotations

import socket
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from .lane_names import DEFAULT_HOME, SOCKET_PATH_MAX, home_dir


def default_home(env: dict[str, str] | None = None) -> Path:
    """``$INBOX_HOME``, else ``~/.local/share/inbox``."""
    return Path(home_dir(env))


def default_host() -> str:
    """This machine's short host name."""
    return socket.gethostname().split(".")[0] or "localhost"


def embedded_socket(home: Path) -> Path:
    """The unix socket of the embedded Redis that ``inbox up`` starts for ``home``.

    Under ``<home>/redis/`` unless that path is too long for a unix socket; then in this
    user's checked folder under ``/tmp`` (bus.local.runtime_dir), in ``redis-<hash of the
    home>/``, so every process with the same ``INBOX_HOME`` finds the same one.
    """
    path = home.absolute() / "redis" / "redis.sock"
    if len(str(path).encode()) <= SOCKET_PATH_MAX:
        return path
    import hashlib

    from bus.local.runtime_dir import runtime_root

    digest = hashlib.sha256(str(home.absolute()).encode()).hexdigest()[:12]
    return runtime_root() / f"redis-{digest}" / "redis.sock"


def embedded_folder(home: Path) -> Path:
    """The folder of ``home``'s embedded socket and password, made and checked
    (bus.local.runtime_dir.private_folder: :class:`~bus.local.runtime_dir.UnsafeFolder`
    when another user could have put a socket there) when it is outside ``home``."""
    folder = embedded_socket(home).parent
    if folder != home.absolute() / "redis":
        from bus.local.runtime_dir import private_folder

        private_folder(folder)
    return folder


def embedded_auth(home: Path) -> str:
    """``:<password>@`` when the embedded server of ``home`` has a password (it listens on
    TCP too); the password is kept 0600 beside its socket."""
    try:
        password = (embedded_folder(home) / "password").read_text().strip()
    except OSError:
        return ""
    return f":{password}@" if password else ""


def embedded_url(home: Path) -> str:
    """The URL of ``home``'s embedded server: its socket, with its password if it has one
    (its folder checked first: :func:`embedded_folder`)."""
    return f"unix://{embedded_auth(home)}{embedded_socket(home)}"


# What a home that joined another machine's store keeps of it (bus.ops.join): ``KEY=VALUE``
# lines, 0600 in the home; the environment's own value of a key wins.
JOINED_FILE = "store.env"
JOINED_KEYS = ("INBOX_REDIS_URL", "INBOX_BROKER_URL", "INBOX_HOST")


def joined(home: Path) -> dict[str, str]:
    """The store settings ``home`` keeps since it joined a store (empty: none kept)."""
    try:
        text = (home / JOINED_FILE).read_text()
    except (OSError, UnicodeDecodeError):
        return {}
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key in JOINED_KEYS and value:
            out[key] = value
    return out


def with_joined(env: dict[str, str]) -> dict[str, str]:
    """``env`` with what its home keeps since it joined a store, where ``env`` sets none
    of them (``INBOX_REDIS_URL`` in ``env``: the environment chooses, nothing is read)."""
    if env.get("INBOX_REDIS_URL"):
        return env
    kept = joined(default_home(env))
    if not kept:
        return env
    return {**env, **{k: v for k, v in kept.items() if not env.get(k)}}


def redact(url: str) -> str:
    """``url`` with its userinfo and any ``password`` query value replaced by ``***``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "***"
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rsplit("@", 1)[1]
    query = "&".join(
        f"{k}=***" if k.lower() == "password" else f"{k}={v}"
        for k, v in parse_qsl(parts.query, keep_blank_values=True)
    )
    out = f"{parts.scheme}://{netloc}{parts.path}" if parts.scheme else f"{netloc}{parts.path}"
    return out + (f"?{query}" if query else "")


__all__ = [
    "DEFAULT_HOME",
    "JOINED_FILE",
    "JOINED_KEYS",
    "default_home",
    "default_host",
    "embedded_auth",
    "embedded_folder",
    "embedded_socket",
    "embedded_url",
    "joined",
    "redact",
    "with_joined",
]
