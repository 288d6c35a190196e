"""Settings, read from the environment (``INBOX_*``; the names are stable)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from . import locate
from .lane_names import durability_level
from .locate import default_home, default_host
from .status_view import HOST_DOWN_S

SOURCE_ROOT = Path(__file__).resolve().parent.parent.parent
# A durable subscription's cursors unused this long keep no session's events and the
# subscription is forgotten (INBOX_SUB_IDLE_S's default, a week).
SUB_IDLE_S = 7 * 86400.0


def _bool(value: str | None, default: bool) -> bool:
    if value is None or value == "":
        return default
    return value.strip().lower() not in ("0", "false", "no", "off")


def _float(env: dict[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError as exc:
        raise ValueError(f"{name} must be a number, got {raw!r}") from exc


def _positive(env: dict[str, str], name: str, default: float) -> float:
    value = _float(env, name, default)
    if value <= 0:
        raise ValueError(f"{name} must be more than 0 seconds, got {value}")
    return value


def _not_negative(env: dict[str, str], name: str) -> float | None:
    if (env.get(name) or "") == "":
        return None
    value = _float(env, name, 0.0)
    if value < 0:
        raise ValueError(f"{name} must be 0 seconds or more, got {value}")
    return value


def _durability(env: dict[str, str]) -> str:
    raw = (env.get("INBOX_DURABILITY") or "").strip().lower()
    if raw == "":
        return "memory"
    level = durability_level(raw)
    if level is None:
        raise ValueError(f"INBOX_DURABILITY must be one of memory, disk, replica; got {raw!r}")
    return level


def kombu_url(url: str) -> str:
    """``url`` as kombu and Celery's result backend name it: redis-py's ``unix://`` socket
    URL is ``redis+socket://`` there (kombu has no ``unix`` transport); others unchanged."""
    scheme, sep, rest = url.partition("://")
    if sep and scheme.lower() == "unix":
        return f"redis+socket://{rest}"
    return url


# A caller's identity: never handed to the bus's own long-running processes.
ACTING_VARS = ("INBOX_TOKEN", "INBOX_SESSION")


@dataclass(frozen=True)
class Settings:
    """Everything the bus reads from the environment, with their defaults."""

    home: Path = field(default_factory=default_home)
    host: str = field(default_factory=default_host)
    redis_url: str | None = None
    broker_url: str | None = None
    redis_cluster: bool = False
    broker_master_name: str | None = None
    session: str | None = None
    agent_inbox: bool = True
    wake_debounce_s: float = 2.0
    fyi_flush_s: float = 600.0
    retry_s: float = 30.0
    # A wake command (a harness's turn) is ended once it has run this long.
    wake_cmd_timeout_s: float = 900.0
    # A session woken while no harness was there to take the turn (no wake command, no
    # listener) counts as ``running`` until its turn begins; past this it is ``idle`` again
    # (bus.core.status_view).
    wake_turn_timeout_s: float = 300.0
    # How long the answer of a ``send`` task (``celery -A workers result <task id>``) is
    # kept in the broker's Redis; every other task keeps no result.
    send_result_expires_s: float = 3600.0
    secret: str | None = None
    token: str | None = None
    key_prefix: str = "inbox"
    lock_ttl_s: float = 3.0
    visibility_timeout_s: float = 300.0
    stream_keep: int = 1000
    retain_messages: int = 500
    stale_s: float = 3600.0
    expire_s: float = 604800.0
    # Where people open the web inbox (``inbox member link`` prints links under it).
    ui_url: str = "http://127.0.0.1:5252"
    # Trust bounds: Host names the gateway answers (empty: loopback names),
    # a per-sender token bucket, a cap on a session's unread messages, and when an open
    # session's harness counts as gone (its handle may then be taken).
    allowed_hosts: tuple[str, ...] = ()
    send_rate: float = 50.0
    send_burst: float = 500.0
    max_unread: int = 10000
    # The bytes of pictures one session's items may keep in all (its agent's replies and
    # its members' writes together); past it a write with pictures is refused.
    max_picture_bytes: int = 512 * 1024 * 1024
    # How a delivery is kicked: ``celery`` (a task on the host's queue) or
    # ``list`` (the host's kick list, popped by a loop in each worker process; bus.delivery.kick_list).
    kick: str = "list"
    # The scheduler sets the server's memory settings where it allows (bus.store.server_memory).
    memory_settings: bool = True
    # A quiet session's events (its audit trail) are dropped once this old (bus.store.compaction).
    events_keep_s: float = 30.0
    # A reader's own durable subscriptions (MCP ``watch``, the gateway's ``/v1/watch``):
    # at most this many each, and any subscription's cursors unused this long no longer
    # keep a session's events (bus.services.durable_watch).
    sub_max: int = 16
    sub_idle_s: float = SUB_IDLE_S
    # ``inbox up`` and ``compose/local.py`` keep an imported spare per worker and one for the
    # scheduler (bus.ops.standby); the scheduler's follows the workers' unless set.
    worker_standby: bool = True
    scheduler_standby: bool = True
    # How long a call to Redis (the store or the broker) waits for its answer before its
    # connection is dropped and the call tried again on a new one, and a new connection
    # for its server's answer. A host that lost its network (a partition) serves again
    # within about these once the network is back, not when TCP's retransmission, backed
    # off for as long as the cut lasted, comes round. Commands that block (BLPOP, XREAD
    # BLOCK) wait their own block plus ``redis_timeout_s``.
    redis_timeout_s: float = 5.0
    redis_connect_timeout_s: float = 2.0
    # How often a process writes the counters it holds (bus.telemetry.counter_flush); 0:
    # each delivery's at once. None: the process's own default (a worker 1 s, others 0).
    metrics_flush_s: float | None = None
    # What an acknowledged send has survived (bus.core.durability): ``memory`` (the store
    # took it), ``disk`` (its AOF fsynced it: a power cut keeps it), ``replica`` (a replica
    # has it: a failover keeps it). A send that cannot meet the level within
    # ``durability_timeout_s`` is refused (``not_durable``), and resending its id is safe.
    durability: str = "memory"
    durability_timeout_s: float = 2.0
    # A host whose worker has not beaten for this long is ``down`` in status, top, a
    # send's answer and the doctor (bus.core.status_view.beat_state).
    host_down_s: float = HOST_DOWN_S

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None, **overrides: object) -> Settings:
        env = dict(os.environ) if env is None else env
        env = locate.with_joined(env)  # a home that joined a store remembers it
        s = cls(
            home=default_home(env),
            host=env.get("INBOX_HOST") or default_host(),
            redis_url=env.get("INBOX_REDIS_URL") or None,
            broker_url=env.get("INBOX_BROKER_URL") or None,
            redis_cluster=_bool(env.get("INBOX_REDIS_CLUSTER"), False),
            broker_master_name=env.get("INBOX_BROKER_MASTER_NAME") or None,
            session=env.get("INBOX_SESSION") or None,
            agent_inbox=_bool(env.get("INBOX_AGENT_INBOX"), True),
            wake_debounce_s=_float(env, "INBOX_WAKE_DEBOUNCE_S", 2.0),
            fyi_flush_s=_float(env, "INBOX_FYI_FLUSH_S", 600.0),
            retry_s=_float(env, "INBOX_RETRY_S", 30.0),
            wake_cmd_timeout_s=_float(env, "INBOX_WAKE_CMD_TIMEOUT_S", 900.0),
            wake_turn_timeout_s=_positive(env, "INBOX_WAKE_TURN_TIMEOUT_S", 300.0),
            send_result_expires_s=_positive(env, "INBOX_SEND_RESULT_EXPIRES_S", 3600.0),
            secret=env.get("INBOX_SECRET") or None,
            token=env.get("INBOX_TOKEN") or None,
            key_prefix=env.get("INBOX_KEY_PREFIX") or "inbox",
            lock_ttl_s=_float(env, "INBOX_LOCK_TTL_S", 3.0),
            visibility_timeout_s=_float(env, "INBOX_VISIBILITY_TIMEOUT_S", 300.0),
            stale_s=_float(env, "INBOX_STALE_S", 3600.0),
            expire_s=_float(env, "INBOX_EXPIRE_S", 604800.0),
            ui_url=env.get("INBOX_UI_URL") or "http://127.0.0.1:5252",
            allowed_hosts=tuple(
                h.strip() for h in (env.get("INBOX_ALLOWED_HOSTS") or "").split(",") if h.strip()
            ),
            send_rate=_float(env, "INBOX_SEND_RATE", 50.0),
            send_burst=_float(env, "INBOX_SEND_BURST", 500.0),
            max_unread=int(_float(env, "INBOX_MAX_UNREAD", 10000)),
            max_picture_bytes=int(_float(env, "INBOX_MAX_PICTURE_BYTES", 512 * 1024 * 1024)),
            kick="celery" if (env.get("INBOX_KICK") or "").strip().lower() == "celery" else "list",
            memory_settings=_bool(env.get("INBOX_MEMORY_SETTINGS"), True),
            events_keep_s=_float(env, "INBOX_EVENTS_KEEP_S", 30.0),
            sub_max=int(_positive(env, "INBOX_SUB_MAX", 16)),
            sub_idle_s=_positive(env, "INBOX_SUB_IDLE_S", SUB_IDLE_S),
            worker_standby=_bool(env.get("INBOX_WORKER_STANDBY"), True),
            scheduler_standby=_bool(
                env.get("INBOX_SCHEDULER_STANDBY"), _bool(env.get("INBOX_WORKER_STANDBY"), True)
            ),
            redis_timeout_s=_positive(env, "INBOX_REDIS_TIMEOUT_S", 5.0),
            redis_connect_timeout_s=_positive(env, "INBOX_REDIS_CONNECT_TIMEOUT_S", 2.0),
            metrics_flush_s=_not_negative(env, "INBOX_METRICS_FLUSH_S"),
            durability=_durability(env),
            durability_timeout_s=_positive(env, "INBOX_DURABILITY_TIMEOUT_S", 2.0),
            host_down_s=_positive(env, "INBOX_HOST_DOWN_S", HOST_DOWN_S),
        )
        return replace(s, **overrides) if overrides else s  # type: ignore[arg-type]

    def to_env(self) -> dict[str, str]:
        """The ``INBOX_*`` variables that make another process use these settings."""
        env = {
            "INBOX_HOME": str(self.home),
            "INBOX_HOST": self.host,
            "INBOX_KEY_PREFIX": self.key_prefix,
            "INBOX_AGENT_INBOX": "true" if self.agent_inbox else "false",
            "INBOX_WAKE_DEBOUNCE_S": str(self.wake_debounce_s),
            "INBOX_FYI_FLUSH_S": str(self.fyi_flush_s),
            "INBOX_RETRY_S": str(self.retry_s),
            "INBOX_WAKE_CMD_TIMEOUT_S": str(self.wake_cmd_timeout_s),
            "INBOX_WAKE_TURN_TIMEOUT_S": str(self.wake_turn_timeout_s),
            "INBOX_SEND_RESULT_EXPIRES_S": str(self.send_result_expires_s),
            "INBOX_LOCK_TTL_S": str(self.lock_ttl_s),
            "INBOX_VISIBILITY_TIMEOUT_S": str(self.visibility_timeout_s),
            "INBOX_STALE_S": str(self.stale_s),
            "INBOX_EXPIRE_S": str(self.expire_s),
            "INBOX_UI_URL": self.ui_url,
            "INBOX_SEND_RATE": str(self.send_rate),
            "INBOX_SEND_BURST": str(self.send_burst),
            "INBOX_MAX_UNREAD": str(self.max_unread),
            "INBOX_MAX_PICTURE_BYTES": str(self.max_picture_bytes),
            "INBOX_KICK": self.kick,
            "INBOX_EVENTS_KEEP_S": str(self.events_keep_s),
            "INBOX_SUB_MAX": str(self.sub_max),
            "INBOX_SUB_IDLE_S": str(self.sub_idle_s),
            "INBOX_REDIS_TIMEOUT_S": str(self.redis_timeout_s),
            "INBOX_REDIS_CONNECT_TIMEOUT_S": str(self.redis_connect_timeout_s),
            "INBOX_DURABILITY": self.durability,
            "INBOX_DURABILITY_TIMEOUT_S": str(self.durability_timeout_s),
            "INBOX_HOST_DOWN_S": str(self.host_down_s),
        }
        if not self.memory_settings:
            env["INBOX_MEMORY_SETTINGS"] = "0"
        if not self.worker_standby:
            env["INBOX_WORKER_STANDBY"] = "0"
        if self.scheduler_standby != self.worker_standby:
            env["INBOX_SCHEDULER_STANDBY"] = "1" if self.scheduler_standby else "0"
        if self.redis_cluster:
            env["INBOX_REDIS_CLUSTER"] = "1"
        if self.allowed_hosts:
            env["INBOX_ALLOWED_HOSTS"] = ",".join(self.allowed_hosts)
        optional = {
            "INBOX_REDIS_URL": self.redis_url,
            "INBOX_BROKER_URL": self.broker_url,
            "INBOX_BROKER_MASTER_NAME": self.broker_master_name,
            "INBOX_SESSION": self.session,
            "INBOX_SECRET": self.secret,
            "INBOX_TOKEN": self.token,
        }
        env.update({k: v for k, v in optional.items() if v})
        if self.metrics_flush_s is not None:
            env["INBOX_METRICS_FLUSH_S"] = str(self.metrics_flush_s)
        return env

    def child_env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """A whole environment for a child process (worker, scheduler, CLI) of this bus:
        ``base`` (default ``os.environ``) without its ``INBOX_*``, plus these settings, with
        this source tree first on ``PYTHONPATH`` so ``-A workers`` imports this code."""
        env = {
            k: v
            for k, v in (os.environ if base is None else base).items()
            if not k.startswith("INBOX_")
        }
        env.update(self.to_env())
        path = env.get("PYTHONPATH")
        env["PYTHONPATH"] = f"{SOURCE_ROOT}{os.pathsep}{path}" if path else str(SOURCE_ROOT)
        return env

    def service_env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """:meth:`child_env` for the bus's own processes (worker, scheduler, command
        server): without ``INBOX_TOKEN`` and ``INBOX_SESSION``, so none of them acts as
        whoever's shell started it; each caller's token comes with its own request."""
        env = self.child_env(base)
        for name in ACTING_VARS:
            env.pop(name, None)
        return env

    @property
    def embedded_socket(self) -> Path:
        """Unix socket of the embedded Redis that ``inbox up`` starts.

        Under ``$INBOX_HOME/redis/`` unless that path is too long for a unix socket
        (108 bytes on Linux, 104 on macOS); then a short path under /tmp named by a hash
        of the home, so every process with the same ``INBOX_HOME`` finds the same one
        (:func:`bus.core.locate.embedded_socket`).
        """
        return locate.embedded_socket(self.home)

    @property
    def embedded_data(self) -> Path:
        return self.home / "redis"

    def embedded_auth(self) -> str:
        """``:<password>@`` when the embedded server has a password (it listens on TCP
        too); the password is kept 0600 beside its socket."""
        return locate.embedded_auth(self.home)

    def store_url(self) -> str:
        """The bus store's URL: ``INBOX_REDIS_URL``, else the embedded server's socket."""
        if self.redis_url:
            return self.redis_url
        if self.redis_cluster:
            raise ValueError("INBOX_REDIS_CLUSTER=1 needs INBOX_REDIS_URL naming a cluster node")
        return locate.embedded_url(self.home)

    def celery_broker_url(self) -> str:
        """Celery's broker: ``INBOX_BROKER_URL``, else the store's Redis in kombu's spelling
        (:func:`kombu_url`: a ``unix://`` store URL, as ``inbox up`` prints it, is
        ``redis+socket://`` to kombu), else the embedded server's socket."""
        if self.broker_url:
            return kombu_url(self.broker_url)
        if self.redis_cluster:
            # kombu has no cluster transport: the broker is a standalone Redis of its own.
            raise ValueError("INBOX_REDIS_CLUSTER=1 needs INBOX_BROKER_URL (a standalone Redis)")
        if self.redis_url:
            return kombu_url(self.redis_url)
        return f"redis+socket://{self.embedded_auth()}{self.embedded_socket}"
