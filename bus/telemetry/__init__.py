"""Counters and heartbeats, shared by every process through Redis.

``metrics`` (counters, the latency histogram, the Prometheus collector) and
``liveness`` (each worker's and the scheduler's heartbeat, the queue names),
``host_floor`` (each host's floor counts), ``status`` (``inbox status``'s answer).

May import: ``bus.store``, ``bus.core``.
"""
