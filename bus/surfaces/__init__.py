"""The surfaces: each parses its input and makes one library call.

``cli`` (the ``inbox`` command), ``http`` (the gateway), ``mcp_server``, ``web`` (the
pages), ``harness`` (each harness's hooks, their installer, wakes and the reference socket
listener), ``command_server`` (the warm server of the write commands), ``refusal`` (the
one refusal shape), ``entry`` (the small console entry point) and the read
commands' lane (``fast_read``, ``read_answers``).

May import: ``bus.api`` and anything below it. Nothing imports a surface.
"""
