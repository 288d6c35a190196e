"""The compose/ topology as local processes: one Redis, a worker per host, one scheduler.

``python compose/local.py --hosts a,b --dir DIR`` is the command-line face of
:func:`start_topology`. Each "host" is a worker with ``INBOX_HOST=<host>`` and its own
``INBOX_HOME=DIR/<host>`` (its own file floor), all sharing one Redis, exactly as the
containers of ``compose/docker-compose.yml`` do; so a multi-host deployment can be tried
(and tested) on one machine.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bus.core.models import check_session_id
from bus.core.settings import Settings
from bus.store.server_probe import progress_client

from .embedded import EmbeddedRedis
from .standby import Standby, scheduler_standby_argv, standby_argv, standby_enabled
from .supervise import Child, HomeLock, Supervisor, signal_group, spawn_logged

# Where `bus` and `workers` are imported from, so children find them from any directory.
SOURCE_ROOT = Path(__file__).resolve().parent.parent.parent


@dataclass
class Topology:
    """A running local topology; :meth:`stop` ends every process it started."""

    base_dir: Path
    hosts: list[str]
    redis_url: str
    broker_url: str
    key_prefix: str | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    children: list[Child] = field(default_factory=list)
    redis: EmbeddedRedis | None = None
    supervisor: Supervisor | None = None
    lock: HomeLock | None = None

    def home(self, host: str) -> Path:
        return self.base_dir / host

    def settings_env(self, host: str) -> dict[str, str]:
        """Only the inbox settings that make a process act as ``host`` of this topology."""
        env = {
            "INBOX_HOST": host,
            "INBOX_HOME": str(self.home(host)),
            "INBOX_REDIS_URL": self.redis_url,
            "INBOX_BROKER_URL": self.broker_url,
        }
        if self.key_prefix:
            env["INBOX_KEY_PREFIX"] = self.key_prefix
        return {**self.extra_env, **env}

    def env_for(self, host: str) -> dict[str, str]:
        """A whole environment for a child process acting as ``host`` (CLI, celery call)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("INBOX_")}
        path = env.get("PYTHONPATH")
        env["PYTHONPATH"] = f"{SOURCE_ROOT}{os.pathsep}{path}" if path else str(SOURCE_ROOT)
        env.update(self.settings_env(host))
        return env

    def export_lines(self, host: str) -> list[str]:
        return [f"export {k}={shlex.quote(v)}" for k, v in self.settings_env(host).items()]

    def dead(self) -> list[Child]:
        return [c for c in self.children if c.proc.poll() is not None]

    def stop(self, timeout: float = 20.0) -> None:
        """Stop workers and scheduler (whole process groups), then Redis; free the lock."""
        if self.supervisor is not None:
            self.supervisor.stop(timeout)
            self.supervisor = None
        else:
            for child in self.children:
                if hasattr(child, "proc"):
                    signal_group(child.proc, signal.SIGTERM)
                    child.proc.wait(timeout)
        self.children.clear()
        if self.redis is not None:
            self.redis.stop()
            self.redis = None
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def __enter__(self) -> Topology:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    signal_group(proc, sig)


def start_topology(
    base_dir: Path | str,
    hosts: list[str],
    *,
    key_prefix: str | None = None,
    redis_url: str | None = None,
    redis_port: int = 0,
    concurrency: int = 1,
    env: dict[str, str] | None = None,
    ready_timeout: float = 60.0,
) -> Topology:
    """Start Redis (embedded, persistent, unless ``redis_url``), a worker per host, the scheduler.

    Returns once every worker reports ready. Logs go to ``DIR/<host>/worker.log`` and
    ``DIR/scheduler.log``. ``env`` adds settings (e.g. ``INBOX_WAKE_DEBOUNCE_S``) to all.
    """
    if not hosts:
        raise ValueError("a topology needs at least one host")
    if len(set(hosts)) != len(hosts):
        raise ValueError(f"hosts repeat: {hosts}")
    for host in hosts:
        check_session_id(host, "host name")
    base = Path(base_dir).absolute()
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    # One topology per directory, shared with `inbox up` on INBOX_HOME=DIR (same Redis).
    lock = HomeLock(base).acquire()
    embedded: EmbeddedRedis | None = None
    redis_child: Child | None = None
    if redis_url:
        broker_url = redis_url
    else:
        # Same socket placement as `inbox up` (a short /tmp path when DIR is too deep).
        place = Settings(home=base)
        server = embedded = EmbeddedRedis(
            place.embedded_socket, place.embedded_data, port=redis_port
        )

        def spawn_redis() -> subprocess.Popen[bytes]:
            proc = server.start().proc
            assert proc is not None
            return proc

        redis_child = Child("redis", spawn_redis, stage=1)
        try:
            redis_child.start()
        except BaseException:
            lock.release()
            raise
        if redis_port:
            redis_url = broker_url = embedded.tcp_url
        else:
            redis_url, broker_url = embedded.url, embedded.broker_url
    topo = Topology(
        base_dir=base,
        hosts=list(hosts),
        redis_url=redis_url,
        broker_url=broker_url,
        key_prefix=key_prefix,
        extra_env=dict(env or {}),
        redis=embedded,
        lock=lock,
    )
    topo.supervisor = Supervisor(
        topo.children + ([redis_child] if redis_child else []),
        name="local",
        store=progress_client(redis_url, key_prefix or "inbox"),
    )
    try:
        exe = [sys.executable, "-m", "bus.surfaces.cli.app"]
        for host in hosts:
            topo.home(host).mkdir(exist_ok=True, mode=0o700)
            argv = [*exe, "worker", "--concurrency", str(concurrency), "--loglevel", "info"]
            log = topo.home(host) / "worker.log"
            env_h = topo.env_for(host)
            cold = spawn_logged(argv, env_h, log)
            spare = (
                Standby(standby_argv(concurrency), env_h, log, cold)
                if standby_enabled(env_h)
                else None
            )
            child = Child(f"worker-{host}", spare or cold, log=log, standby=spare)
            child.host = host
            topo.children.append(child)
        # Exactly one scheduler for the whole bus; it needs no floor of its own.
        log = base / "scheduler.log"
        env_s = topo.env_for(hosts[0])
        cold_s = spawn_logged([*exe, "scheduler"], env_s, log)
        spare_s = (
            Standby(scheduler_standby_argv(), env_s, log, cold_s)
            if standby_enabled(env_s, scheduler=True)
            else None
        )
        topo.children.append(Child("scheduler", spare_s or cold_s, log=log, standby=spare_s))
        topo.supervisor.children[:0] = topo.children
        for child in topo.children:
            child.start()
        _wait_ready(topo, ready_timeout)
        topo.supervisor.run_in_background()
    except BaseException:
        topo.stop()
        raise
    return topo


def _wait_ready(topo: Topology, timeout: float) -> None:
    """Block until every worker's log says ``ready.`` (Celery's own signal)."""
    deadline = time.monotonic() + timeout
    waiting = [c for c in topo.children if c.name.startswith("worker-")]
    while waiting:
        for child in topo.dead():
            raise RuntimeError(f"{child.name} exited ({child.proc.returncode}):\n{child.tail()}")
        waiting = [c for c in waiting if " ready." not in c.tail(200_000)]
        if waiting and time.monotonic() > deadline:
            raise RuntimeError(f"{waiting[0].name} did not start:\n{waiting[0].tail()}")
        time.sleep(0.1)


__all__ = ["Topology", "start_topology"]
