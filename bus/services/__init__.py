"""What a caller asks for: sessions, sends, conversations, requests, items.

``sessions`` (open, turn, close), ``routing`` (a send into its receiver's queue),
``send_many`` (batched sends), ``send_rate`` (the sender's bucket), ``door`` (prox's
local ``/send``), ``conversation`` (threads: read, reply, withdraw), ``typed_requests``,
``items`` and ``pictures`` (for members), ``watch`` and ``durable_watch`` (the
coordinator's views), ``credentials`` (tokens issued, revoked, current),
``signin_links``, ``id_owner``; ``batch_wire``, ``batch_write`` and ``overlap`` are the
batched ingest's parts.
Each service is a class the facade builds once with what it uses; none receives the facade.

May import: ``bus.delivery``, ``bus.trust``, ``bus.telemetry``, ``bus.store``,
``bus.core``.
"""
