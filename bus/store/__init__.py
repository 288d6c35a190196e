"""The Redis store: the only door to Redis.

``store.Store`` (one class, its parts one per aggregate: ``sessions``, ``queue``,
``locks``, ``schedule``, ``inbox``, ``delivery``, ``receipts``, ``kick``, ``items``,
``many``, ``ingest``, ``metrics``, ``stream_compact``, ``conversations``,
``subscriptions``), every key (``keys``), every Lua script (``lua/``, each headed by its
KEYS and ARGV), the cluster adapters, the clients (``connection``, ``connect``,
``blocking``, ``server_probe`` for the servers ``bus.ops`` starts and watches), and what
"Redis is down" means (``redis_errors``: the store's
own ``StoreFailed``, ``StoreError`` and ``Unavailable``; ``outage_log``).

May import: ``bus.core``, redis. The fast lanes (bus.lanes) use the read parts, ``keys``
and ``lua_files``, which import neither redis-py nor pydantic at import.
"""
