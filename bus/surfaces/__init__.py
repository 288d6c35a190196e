"""The surfaces: each parses its input and makes one library call.

``cli`` (the ``inbox`` command), ``http`` (the gateway), ``mcp_server``, ``web`` (the
pages), ``harness`` (each harness's hooks, their installer, wakes and the reference socket
listener), ``command_server`` (the warm server of the write commands), ``refusal`` (the
one refusal shape); ``entry`` forwards the console script of older installs to
bus.lanes.entry, the console entry point of the fast lanes.

May import: ``bus.api`` and anything below it. Nothing imports a surface.
"""
