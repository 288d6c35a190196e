"""From a session's queue to its socket or floor, and the one notice it hears.

``dispatch`` (asking a host's worker), ``kick_list`` (the worker's delivery loops), ``host``
(``DeliveryParts``: what the engine, the loops and the scheduler are given, never the facade),
``engine`` (the one engine: sessions delivered as a batch, a lone one a batch of one, each
under its ``lease``, its stages begin, take, snapshot, plan, notice, finish; the lock
hand-off), ``run`` (one session's run through the stages, the steps they share), ``take``
(the take stage's parts: entries into the inbox or written raw),
``inbox`` (threads, marks and the plan), ``notice`` (the one notice), ``raw_lines`` (a
message written as its own line), ``floor``, ``floor_lines`` (a line's bytes, the listener's
record of lines it handed on) and ``drain_marks`` (a drain's notice marks) (the file floor),
``heard`` (when a notice counts as heard), ``receipts`` (the sender's side),
``scheduler`` (debounced wakes, flushes, retries), ``renewer`` (one thread a process renewing
the leases of running batches), ``report`` (what a delivery did, and the work an operator
sees of it).

May import: ``bus.trust``, ``bus.telemetry``, ``bus.store``, ``bus.core``.
"""
