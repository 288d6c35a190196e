"""The Redis store: the only door to Redis.

``store.Store`` (one class, its parts per aggregate: ``inbox``, ``delivery``, ``items``,
``kick``, ``many``, ``metrics``, ``receipts``, ``stream_compact``, ``conversations``,
``subscriptions``), every key (``keys``), every Lua script (``lua/``, each headed by its
KEYS and ARGV), the cluster adapters, the clients (``connection``, ``connect``, ``blocking``, the fast drain's
``resp_client``, ``server_probe`` for the servers ``bus.ops`` starts and watches),
and what "Redis is down" means (``redis_errors``, ``outage_log``).

May import: ``bus.core``, redis.
"""
