"""The surfaces: each parses its input and makes one library call.

``cli`` (the ``inbox`` command), ``entry`` (its small console entry point),
``http`` (the gateway), ``mcp_server``, ``web`` (the pages), ``hooks`` (harness hooks),
``listener`` (the reference socket listener), ``refusal`` (the one refusal shape).

May import: ``bus.api`` and anything below it. Nothing imports a surface.
"""
