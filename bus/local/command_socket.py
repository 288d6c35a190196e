"""Where the warm command server of ``inbox up`` listens: beside the embedded Redis's socket.

Standard library only (no pathlib for a home short enough): the send lane (bus.lanes.send)
finds the socket here at every ``inbox send``; bus.surfaces.command_server binds it.
"""

from __future__ import annotations

import os

from bus.core.lane_names import COMMAND_SOCKET, SOCKET_PATH_MAX


def command_socket_path(home: str) -> str:
    """The command server's socket for ``home``: ``<home>/redis/commands.sock`` when the
    embedded socket's path there is short enough, else beside the embedded socket in this
    user's folder under ``/tmp`` (bus.core.locate.embedded_socket). Nothing is made or
    checked."""
    path = os.path.join(os.path.abspath(home), "redis", "redis.sock")
    if len(path.encode()) > SOCKET_PATH_MAX:
        from pathlib import Path

        from bus.core.locate import embedded_socket

        path = str(embedded_socket(Path(home)))
    return os.path.join(os.path.dirname(path), COMMAND_SOCKET)


def command_socket(home: str) -> str:
    """:func:`command_socket_path`, its folder under ``/tmp`` made and checked first
    (bus.core.locate.embedded_folder: ``UnsafeFolder`` when another user could listen
    there): where a client may connect."""
    path = os.path.join(os.path.abspath(home), "redis", "redis.sock")
    if len(path.encode()) > SOCKET_PATH_MAX:
        from pathlib import Path

        from bus.core.locate import embedded_folder

        embedded_folder(Path(home))
    return command_socket_path(home)


__all__ = ["command_socket", "command_socket_path"]
