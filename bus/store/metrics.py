"""The store's metrics side: the two shared counter hashes (``Keys.metrics``, ``Keys.latency``).

A part of the store's ``server`` aggregate (:class:`bus.store.store.Server`); :class:`bus.telemetry.metrics.Metrics`
holds the policy (field names, buckets, batching) and calls these for every Redis command.
Counters are named by key *name* (``"metrics"`` or ``"latency"``), resolved here from
:class:`bus.store.keys.Keys`, so no caller builds a key.
"""

from __future__ import annotations

from typing import Any

from .cluster import is_cluster

COUNTER_HASHES = ("metrics", "latency")


class MetricsStore:
    """Counter hashes: add to fields, read both back."""

    r: Any
    k: Any

    def _counter_key(self, name: str) -> str:
        if name not in COUNTER_HASHES:
            raise ValueError(f"no counter hash named {name!r}")
        return str(getattr(self.k, name))

    def counter_incr(self, field: str, n: int = 1) -> None:
        """Add integer ``n`` to ``field`` of the counters hash: one command."""
        self.r.hincrby(self.k.metrics, field, n)

    def counter_add_many(
        self, writes: list[tuple[str, str, float]], *, atomic: bool | None = None
    ) -> None:
        """Apply ``(hash name, field, n)`` additions in one round trip, in order (an ``int``
        ``n`` by HINCRBY, a ``float`` by HINCRBYFLOAT). ``atomic``: in MULTI; ``None``
        means MULTI where the server allows it (a cluster refuses one spanning two slots).
        """
        if not writes:
            return
        if atomic is None:
            atomic = not is_cluster(self.r)
        pipe = self.r.pipeline(transaction=atomic)
        for name, field, n in writes:
            key = self._counter_key(name)
            if isinstance(n, float):
                pipe.hincrbyfloat(key, field, n)
            else:
                pipe.hincrby(key, field, n)
        pipe.execute()

    def counters_read(self) -> tuple[dict[Any, Any], dict[Any, Any]]:
        """Both hashes as stored, ``(counters, latency)``, in one round trip; empty when
        nothing was counted. Field names and values are str or bytes as the client gives."""
        pipe = self.r.pipeline(transaction=False)
        pipe.hgetall(self.k.metrics)
        pipe.hgetall(self.k.latency)
        counters, latency = pipe.execute()
        return counters, latency
