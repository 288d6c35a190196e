"""The Redis store: the only door to Redis.

``store.Store`` (the plumbing, ``core``, with ``many`` and ``durable``; and its
aggregates, each an attribute: ``sessions``, ``members``, ``queue``, ``inbox``,
``receipts``, ``delivery``, ``schedule``, ``items``, ``events``, ``server``, built from
the part modules that hold their methods and typed by ``aggregates``' Protocols), every
key (``keys``), every Lua script (``lua/``, each headed by its KEYS and ARGV), the
cluster adapters, the clients (``connection``, ``connect``, ``blocking``, ``server_probe``
for the servers ``bus.ops`` starts and watches), and what "Redis is down" means
(``redis_errors``: the store's own ``StoreFailed``, ``StoreError`` and ``Unavailable``;
``outage_log``).

May import: ``bus.core``, redis. The fast lanes (bus.lanes) use the read parts, ``keys``
and ``lua_files``, which import neither redis-py nor pydantic at import.
"""
