"""What a caller asks for: sessions, sends, conversations, requests, items.

``sessions`` (open, turn, close), ``routing`` (a send into its receiver's queue),
``send_many`` (batched sends), ``conversation`` (threads: read, reply, withdraw),
``typed_requests``, ``items`` and ``pictures`` (for members), ``watch`` (the
coordinator's views), ``signin_links``; ``ports`` names what each needs of the facade.

May import: ``bus.delivery``, ``bus.trust``, ``bus.telemetry``, ``bus.store``,
``bus.core``.
"""
