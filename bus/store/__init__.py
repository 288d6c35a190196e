"""The Redis store: the only door to Redis.

``store.Store`` (one class, its parts one per aggregate: ``sessions``, ``queue``,
``locks``, ``schedule``, ``inbox``, ``delivery``, ``receipts``, ``kick``, ``items``,
``many``, ``metrics``, ``stream_compact``, ...), every key (``keys``), every Lua script
(``lua/``, each headed by its KEYS and ARGV), the cluster adapters, the clients
(``connection``, ``blocking``), the drain's fast lane (``fast_lane`` over
``resp_client``), and what "Redis is down" means (``redis_errors``: the store's own
``StoreFailed`` and ``Unavailable``; ``outage_log``).

May import: ``bus.core``, redis.
"""
