"""How an installed hook finds the bus from the bare environment its harness gives it.

A hook command carries the settings that locate the bus (``INBOX_HOME``, ``INBOX_HOST``,
``INBOX_KEY_PREFIX``, the Redis URLs) as ``NAME=value`` before the ``inbox`` path, because
harnesses run hooks through ``sh -c`` with the user's own environment. A settings file is
often committed or shared, so no secret goes into it: a Redis URL with a password
(``redis://:pw@host``, ``redis://user:pw@host``, ``?password=pw``) is written instead into
``$INBOX_HOME/hooks.env.json`` (0600, in the 0700 home), and the hook reads it back at
start (:func:`load_hook_env`). ``INBOX_SECRET`` and ``INBOX_TOKEN`` are never written.
"""

from __future__ import annotations

import json
import os
import shlex
import tempfile
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from .locate import redact
from .settings import default_home

# The settings that locate the bus, in the order a command carries them.
HOOK_ENV = ("INBOX_HOME", "INBOX_REDIS_URL", "INBOX_BROKER_URL", "INBOX_HOST", "INBOX_KEY_PREFIX")
URL_SETTINGS = ("INBOX_REDIS_URL", "INBOX_BROKER_URL")
ENV_FILE = "hooks.env.json"


def has_secret(url: str) -> bool:
    """True when ``url`` carries a password (in its userinfo or a ``password`` query)."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return "@" in url or "password=" in url.lower()
    if password:
        return True
    if parts.username and "@" in parts.netloc and ":" not in parts.netloc.split("@", 1)[0]:
        # redis://secret@host: Redis reads a lone userinfo as the password.
        return True
    return any(k.lower() == "password" for k, _ in parse_qsl(parts.query))


def env_file(home: Path) -> Path:
    return home / ENV_FILE


def split_env(env: dict[str, str] | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """``(on the command line, kept in the 0600 file)``: the locating settings set now."""
    env = dict(os.environ) if env is None else env
    shown = {name: env[name] for name in HOOK_ENV if env.get(name)}
    home = env.get("INBOX_HOME")
    if home:  # absolute: the hook runs in the project's folder, not this one
        shown["INBOX_HOME"] = str(Path(home).expanduser().absolute())
    kept = {name: shown.pop(name) for name in URL_SETTINGS if has_secret(shown.get(name, ""))}
    if kept and "INBOX_HOME" not in shown:
        # The file is found through INBOX_HOME, so the hook must carry it.
        shown = {"INBOX_HOME": str(default_home(env).absolute()), **shown}
    return shown, kept


def hook_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The settings a hook command carries (never a password)."""
    return split_env(env)[0]


def prefix(env: dict[str, str]) -> str:
    """``NAME=value ...`` quoted for ``sh -c``, with a trailing space when not empty."""
    return "".join(f"{k}={shlex.quote(v)} " for k, v in env.items())


def write_env_file(home: Path, kept: dict[str, str]) -> Path | None:
    """Keep ``kept`` (URLs with passwords) in ``home``'s 0600 file for hooks; None if none.
    Settings already kept there for another URL stay."""
    if not kept:
        return None
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = env_file(home)
    current = _read(path)
    current.update(kept)
    fd, tmp = tempfile.mkstemp(dir=home, prefix=f".{ENV_FILE}.")
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(current, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)
    return path


def _read(path: Path) -> dict[str, str]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if k in URL_SETTINGS and isinstance(v, str)}


def load_hook_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """Put the URLs kept in ``$INBOX_HOME/hooks.env.json`` into ``env`` (``os.environ`` by
    default) where that has none; returns what was added. A file others may read is
    ignored: a password must not be taken from a file anyone could have written."""
    target = os.environ if env is None else env
    path = env_file(default_home(dict(target)))
    try:
        st = path.stat()
    except OSError:
        return {}
    if st.st_mode & 0o077 or st.st_uid != os.getuid():
        return {}
    added = {k: v for k, v in _read(path).items() if not target.get(k)}
    target.update(added)
    return added


__all__ = [
    "HOOK_ENV",
    "has_secret",
    "hook_env",
    "load_hook_env",
    "redact",
    "split_env",
    "write_env_file",
]
