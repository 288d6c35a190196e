"""From a session's queue to its socket or floor, and the one notice it hears.

``dispatch`` (asking a host's worker), ``kick_list`` (the worker's delivery loops),
``lock_handoff`` and ``engine`` (one session's delivery under its ``lease``), ``batch``
(many sessions at once), ``inbox`` (threads, marks and the notice), ``raw_lines`` (a
message written as its own line), ``floor`` and ``fast_drain`` (the file floor),
``heard`` (when a notice counts as heard), ``receipts`` (the sender's side),
``scheduler`` (debounced wakes, flushes, retries).

May import: ``bus.trust``, ``bus.telemetry``, ``bus.store``, ``bus.core``.
"""
