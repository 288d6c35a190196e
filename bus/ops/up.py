"""``inbox up``: the whole bus for this host in the foreground, supervised.

With no ``INBOX_REDIS_URL``, an embedded Redis (persistent, on a unix socket under
``$INBOX_HOME``) is started first; then this host's worker and the scheduler run as
child processes under :class:`bus.ops.supervise.Supervisor`, with the write commands'
warm start (bus.surfaces.command_server), their output in
``$INBOX_HOME/logs/`` (the terminal gets the bus's own lines): a child that exits comes back
(with backoff, one log line each time), a worker that holds work without progress is
restarted, a worker refused its host (another floor serves it) or whose home is gone
stops everything with its exit code (5 or 6, :mod:`bus.telemetry.host_floor`), and Ctrl-C (or SIGTERM) stops the worker and scheduler, then Redis. The worker
and the scheduler each have an imported spare that a restart promotes (bus.ops.standby;
``INBOX_WORKER_STANDBY`` and ``INBOX_SCHEDULER_STANDBY`` of ``inbox up``'s settings). Once per
``INBOX_HOME``: a second ``inbox up`` says "already running (pid N)" and exits 1.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

from bus.core.settings import Settings
from bus.local.private_files import private_dirs
from bus.local.runtime_dir import private_folder
from bus.local.up_procs import remove_procs, write_procs
from bus.store.server_probe import progress_on
from bus.telemetry.host_floor import EXIT_HOME_GONE, EXIT_HOST_TAKEN

from .embedded import EmbeddedRedis
from .join import check_listen, remember_store, say_join
from .server_gate import up_gate
from .standby import Standby, scheduler_standby_argv, standby_argv
from .supervise import AlreadyRunning, Child, HomeLock, Supervisor, spawn_logged
from .upgrade import EXIT_DATA_TOO_NEW

# A store that has not answered this long at the start is said to be awaited.
STORE_QUIET_S = 5.0


def _banner(settings: Settings, url: str, logs: Path) -> str:
    return "\n".join(
        [
            f"inbox up: host {settings.host}, store {url}, home {settings.home}",
            f"  worker:     running ({logs / 'worker.log'})",
            f"  scheduler:  running: wakes, flushes, retries ({logs / 'scheduler.log'})",
            f"  commands:   running: send, reply, withdraw, decide start warm ({logs / 'commands.log'})",
            "  register a session:  inbox session open demo",
            f"  send to it:          inbox send --to-id demo --from {settings.host}:me --text hello",
            "  read its floor:      inbox drain demo --stamped",
            "Ctrl-C stops everything.",
        ]
    )


def prepare_store(settings: Settings, store_url: str, stop: threading.Event) -> None:
    """Once the store answers (or Ctrl-C), refuse a store whose data is newer than this
    host's code, upgrade older data and name the wake commands that wait for a person
    (bus.ops.upgrade.prepare)."""
    from bus.store import data_version
    from bus.store.connect import open_store

    from .upgrade import prepare

    store = open_store(replace(settings, redis_url=store_url))
    try:
        waited = time.monotonic() + STORE_QUIET_S
        while not data_version.answers(store):
            if waited and time.monotonic() > waited:
                print("inbox up: waiting for the store to answer (Ctrl-C stops)", flush=True)
                waited = 0.0
            if stop.wait(0.1):
                return
        prepare(store, settings, lambda line: print(line, flush=True))
    finally:
        data_version.close(store)


def run_up(
    settings: Settings,
    *,
    concurrency: int = 2,
    redis_port: int = 0,
    listen: str = "",
    clear_text: bool = False,
) -> int:
    """Start Redis (embedded unless configured), a worker and the scheduler; supervise.
    ``listen``: the address the embedded server also serves other machines on (with
    ``redis_port`` and ``clear_text``: it has no TLS; :mod:`bus.ops.join`)."""
    check_listen(settings, redis_port=redis_port, listen=listen, clear_text=clear_text)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    private_dirs(settings.home)  # $INBOX_HOME holds the floor, items and Redis: 0700
    # Where the sockets go when the home is deep: this user's folder, else refused here.
    private_folder(settings.embedded_socket.parent)
    try:
        lock = HomeLock(settings.home).acquire()
    except AlreadyRunning as exc:
        print(f"inbox up: {exc}", file=sys.stderr, flush=True)
        return 1
    try:
        return _supervise(
            settings,
            stop,
            concurrency=concurrency,
            redis_port=redis_port,
            listen=listen,
            clear_text=clear_text,
        )
    finally:
        lock.release()


def processes(
    settings: Settings, env: dict[str, str], logs: Path, *, concurrency: int
) -> list[Child]:
    """The worker and the scheduler, each with its spare unless ``settings`` (read from
    ``inbox up``'s own environment) turn it off."""
    exe = [sys.executable, "-m", "bus.surfaces.cli.app"]
    worker = [*exe, "worker", "--concurrency", str(concurrency)]
    wlog, slog = logs / "worker.log", logs / "scheduler.log"
    fatal = {
        EXIT_HOST_TAKEN: f"another floor serves host {settings.host}; stopping",
        EXIT_HOME_GONE: f"its INBOX_HOME {settings.home} is gone; stopping",
        EXIT_DATA_TOO_NEW: "the store's data is newer than this host's inbox; stopping",
    }
    cold = spawn_logged(worker, env, wlog)
    spare = Standby(standby_argv(concurrency), env, wlog, cold) if settings.worker_standby else None
    cold_s = spawn_logged([*exe, "scheduler"], env, slog)
    spare_s = (
        Standby(scheduler_standby_argv(), env, slog, cold_s) if settings.scheduler_standby else None
    )
    # The write commands' warm start (bus.surfaces.command_server): `inbox send` hands its
    # argv to this process's forks instead of importing the library itself.
    clog = logs / "commands.log"
    commands = spawn_logged([sys.executable, "-m", "bus.surfaces.command_server"], env, clog)
    return [
        Child("worker", spare or cold, host=settings.host, log=wlog, fatal=fatal, standby=spare),
        Child("scheduler", spare_s or cold_s, log=slog, standby=spare_s),
        Child("commands", commands, log=clog),
    ]


def _supervise(
    settings: Settings,
    stop: threading.Event,
    *,
    concurrency: int,
    redis_port: int,
    listen: str = "",
    clear_text: bool = False,
) -> int:
    env = settings.service_env()  # the shell's INBOX_TOKEN and INBOX_SESSION stay here
    children: list[Child] = []
    served = ""  # the URL other machines reach the store at
    if settings.redis_url:
        served = settings.redis_url
        remember_store(settings)  # every later command in this home finds the store
    else:
        embedded = EmbeddedRedis(
            settings.embedded_socket,
            settings.embedded_data,
            port=redis_port,
            bind=listen or "127.0.0.1",
        )
        embedded.prepare()  # with a port, its password is in the children's URLs
        env["INBOX_REDIS_URL"] = embedded.url
        env.setdefault("INBOX_BROKER_URL", embedded.broker_url)
        if listen:
            served = embedded.tcp_url.replace("@127.0.0.1:", f"@{listen}:")

        def spawn_redis() -> object:
            proc = embedded.start().proc
            assert proc is not None
            for note in embedded.notes:  # a write cut short is said, not silent
                print(f"inbox up: {note}", file=sys.stderr, flush=True)
            return proc

        children.append(Child("redis", spawn_redis, stage=1))  # type: ignore[arg-type]
    url = store_url = env["INBOX_REDIS_URL"]
    if "@" in url:  # never print the embedded server's password
        url = url.split("://", 1)[0] + "://***@" + url.rsplit("@", 1)[1]
    # A server of the user's is checked before anything is started on it.
    if settings.redis_url and not up_gate(store_url, cluster=settings.redis_cluster):
        return 1
    logs = private_dirs(settings.home / "logs")
    children += processes(settings, env, logs, concurrency=concurrency)
    what = "Redis, the worker" if not settings.redis_url else "the worker"
    print(
        f"inbox up: starting {what} and the scheduler for {settings.host} (store {url})",
        flush=True,
    )
    # Progress is judged by the worker's beat in the store and its queue on the broker.
    store = progress_on(
        store_url,
        settings.key_prefix,
        cluster=settings.redis_cluster,
        broker_url=env.get("INBOX_BROKER_URL"),
    )
    sup = Supervisor(children, store=store, record=lambda rows: write_procs(settings.home, rows))
    try:
        # The store's data checked and upgraded before a worker reads it (bus.ops.upgrade).
        sup.start(before_workers=lambda: prepare_store(settings, store_url, stop))
        # The embedded server is checked once it is up (INBOX_SERVER_BINARY may be old).
        if not settings.redis_url and not up_gate(store_url, cluster=False):
            sup.stop()
            if store is not None:
                store.close()
            return 1
    except BaseException:
        sup.stop()
        raise
    print(_banner(settings, url, logs), flush=True)
    say_join(served, clear_text=clear_text)
    try:
        sup.run(stop)
    finally:
        if store is not None:
            store.close()
        remove_procs(settings.home)
        print("inbox up: stopped", flush=True)
    return sup.failed or 0
