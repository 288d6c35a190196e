"""``inbox up``: the whole bus for this host in the foreground.

With no ``INBOX_REDIS_URL``, an embedded Redis (persistent, on a unix socket under
``$INBOX_HOME``) is started first; then this host's worker and the scheduler run as
child processes. Ctrl-C (or SIGTERM) stops the children, then Redis, cleanly.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

from .embedded import EmbeddedRedis
from .private import private_dirs
from .settings import Settings


def _banner(settings: Settings, url: str) -> str:
    return "\n".join(
        [
            f"inbox up: host {settings.host}, store {url}, home {settings.home}",
            "  register a session:  inbox session open demo",
            f"  send to it:          inbox send --to-id demo --from {settings.host}:me --text hello",
            "  read its floor:      inbox drain demo --stamped",
            "Ctrl-C stops everything.",
        ]
    )


def run_up(settings: Settings, *, concurrency: int = 2, redis_port: int = 0) -> int:
    """Start Redis (embedded unless configured), a worker and the scheduler; wait."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    env = dict(os.environ)
    embedded: EmbeddedRedis | None = None
    private_dirs(settings.home)  # $INBOX_HOME holds the floor, items and Redis: 0700
    if not settings.redis_url:
        embedded = EmbeddedRedis(
            settings.embedded_socket, settings.embedded_data, port=redis_port
        ).start()
        env["INBOX_REDIS_URL"] = embedded.url
        env.setdefault("INBOX_BROKER_URL", embedded.broker_url)
    env["INBOX_HOST"] = settings.host
    env["INBOX_HOME"] = str(settings.home)
    url = env["INBOX_REDIS_URL"]
    if "@" in url:  # never print the embedded server's password
        url = url.split("://", 1)[0] + "://***@" + url.rsplit("@", 1)[1]
    exe = [sys.executable, "-m", "bus.cli"]
    children: list[subprocess.Popen[bytes]] = []
    try:
        children.append(
            subprocess.Popen(
                [*exe, "worker", "--concurrency", str(concurrency)], env=env, start_new_session=True
            )
        )
        children.append(subprocess.Popen([*exe, "scheduler"], env=env, start_new_session=True))
        print(_banner(settings, url), flush=True)
        while not stop.wait(0.5):
            for child in children:
                if child.poll() is not None:
                    print(
                        f"inbox up: a child exited ({child.args!r}, code {child.returncode});"
                        " stopping",
                        file=sys.stderr,
                        flush=True,
                    )
                    stop.set()
        return 0 if all(c.poll() is None for c in children) else 1
    finally:
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in children:
            try:
                child.wait(20)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait(5)
        if embedded is not None:
            embedded.stop()
        print("inbox up: stopped", flush=True)
