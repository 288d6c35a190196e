"""Running the bus: ``inbox up``, the supervisor, the embedded Redis, Flower.

``up``, ``supervise``, ``embedded``, ``procs`` (a worker as a child process),
``topology`` (the compose topology as local processes), ``flower``, ``schemas``
(the JSON Schemas export).

May import: everything below ``bus.api``; never ``bus.api`` or ``bus.surfaces``.
"""
