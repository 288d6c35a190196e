"""The store's side of a send's durability level (bus.core.durability): a send's
pipeline run with the level's wait (``WAITAOF``, ``WAIT``) on the same connection, in the
same round trip, and a server without ``WAITAOF`` asked whether it fsyncs every write."""

from __future__ import annotations

from typing import Any

import redis

from bus.core import durability

from .base import StorePart


class DurableStore(StorePart):
    """Runs a send's writes and confirms its durability level before it is acknowledged."""

    _fsyncs_always: str | None = None  # None: not asked; "" yes; else why not

    def execute_durable(
        self, pipe: Any, level: str, timeout_s: float, ids: list[str], sids: list[str]
    ) -> list[Any]:
        """:meth:`~bus.store.many.RoundTrips.execute_loaded` of ``pipe`` (a send's writes to
        the sessions ``sids``), confirmed at ``level`` within ``timeout_s``: the replies;
        :class:`NotDurable` naming ``ids`` when the level was not met (the writes ran: a
        resend of the same ids is stored once). Every send pipeline writes on its
        connection (the recipient index's HSET, even for a resent id), so the wait covers
        an earlier first write too. On a cluster each receiver's node confirms its own
        (:meth:`_cluster_wait`)."""
        command = durability.wait_command(level, timeout_s)
        if command is None:
            return self.execute_loaded(pipe)
        if self.cluster:
            replies = self.execute_loaded(pipe)
            self._cluster_wait(level, command, timeout_s, ids, sids)
            return replies
        stack = [args for args, _options in pipe.command_stack]
        pipe.reset()
        replies, tails = self.run_loaded_then(stack, command)
        for reply in tails:
            why = self._shortfall(level, reply, timeout_s)
            if why is not None:
                raise durability.not_durable(level, why, ids)
        return replies

    def _cluster_wait(
        self,
        level: str,
        command: tuple[Any, ...],
        timeout_s: float,
        ids: list[str],
        sids: list[str],
    ) -> None:
        """A cluster's writes went out on its nodes' own connections: on each receiver's
        node, a short-lived marker in the receiver's slot is written and the wait sent
        after it on one connection. The node's AOF and replication stream are in order,
        so the marker confirmed confirms every write before it there."""
        nodes: dict[str, tuple[Any, str]] = {}
        for sid in sids:
            key = self.k.s(sid, "durable")
            node = self.r.get_node_from_key(key)
            nodes.setdefault(node.name, (node, key))
        for node, key in nodes.values():
            pipe = self.r.get_redis_connection(node).pipeline(transaction=False)
            pipe.set(key, "1", px=1000)
            pipe.execute_command(*command)
            reply = pipe.execute(raise_on_error=False)[-1]
            why = self._shortfall(level, reply, timeout_s)
            if why is not None:
                raise durability.not_durable(level, why, ids)

    def _shortfall(self, level: str, reply: Any, timeout_s: float) -> str | None:
        if level == "disk" and durability.lacks_wait(reply):
            return self.fsync_always() or None
        return durability.shortfall(level, reply, timeout_s)

    def fsync_always(self) -> str:
        """A server without ``WAITAOF`` (older than 7.2) has each write on disk before its
        reply when it runs ``appendonly yes`` with ``appendfsync always``: "" then, else
        why ``disk`` cannot be confirmed (asked once per store client)."""
        if self._fsyncs_always is None:
            info = self.r.info("server")
            name = "Valkey" if info.get("valkey_version") else "Redis"
            version = info.get("valkey_version") or info.get("redis_version") or "?"
            lacks = f"the store ({name} {version}) has no WAITAOF (7.2 and later have it)"
            try:
                got = self.r.config_get("appendfsync")
                aof = self.r.config_get("appendonly")
            except redis.RedisError:  # CONFIG refused (an ACL): cannot tell
                self._fsyncs_always = f"{lacks} and refuses CONFIG GET appendfsync"
                return self._fsyncs_always
            always = got.get("appendfsync") == "always" and aof.get("appendonly") == "yes"
            self._fsyncs_always = "" if always else f"{lacks} and does not run appendfsync always"
        return self._fsyncs_always


class DurabilityCheck(StorePart):
    """Whether the store's server can meet a durability level at all."""

    def durability_unmet(self, level: str) -> str | None:
        """Why this store cannot meet ``level`` at all (:func:`bus.core.durability.unmet_by`),
        or None: what ``inbox doctor`` says before the sends are refused."""
        if level == "memory" or self.cluster:
            return None  # a cluster's nodes are asked at each send
        info: dict[str, Any] = {}
        for section in ("server", "persistence", "replication"):
            info.update(self.r.info(section))
        always = not durability.has_waitaof(info) and self.io.fsync_always() == ""
        return durability.unmet_by(level, info, always)
