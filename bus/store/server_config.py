"""The store's view of the server's own settings (``CONFIG GET`` / ``SET``, bus.store.server_memory).

A part of the store's ``server`` aggregate (:class:`bus.store.store.Server`); on a cluster each call goes to every node.
"""

from __future__ import annotations

from .base import StorePart

# Not ``typing.TYPE_CHECKING``: importing typing alone costs the read lane several ms
# (bus.lanes.read imports this module).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class ConfigStore(StorePart):
    """Read and set server settings on each node; keep the scheduler's outcome."""

    cluster: bool

    def _nodes(self) -> list[Any]:
        return list(self.r.get_nodes()) if self.cluster else [None]

    def server_config(self, names: tuple[str, ...]) -> list[str | None]:
        """Per node, the value of the first of ``names`` the server knows (``None``: none);
        a server refusing CONFIG raises ``redis.ResponseError``."""
        out: list[str | None] = []
        for node in self._nodes():
            value = None
            for name in names:
                if node is None:
                    got = self.r.config_get(name)
                else:
                    got = self.r.config_get(name, target_nodes=node)
                if name in got:
                    value = str(got[name])
                    break
            out.append(value)
        return out

    def set_server_config(self, node: int, names: tuple[str, ...], value: str) -> None:
        """Set the first of ``names`` the node at index ``node`` knows to ``value``."""
        target = self._nodes()[node]
        for name in names:
            got = (
                self.r.config_get(name)
                if target is None
                else self.r.config_get(name, target_nodes=target)
            )
            if name in got:
                if target is None:
                    self.r.config_set(name, value)
                else:
                    self.r.config_set(name, value, target_nodes=target)
                return

    def keep_memory_report(self, fields: dict[str, str]) -> None:
        """The scheduler's last outcome per memory setting (bus.store.server_memory)."""
        self.r.hset(self.k.memory, mapping=fields)

    def memory_report(self) -> dict[str, str]:
        return dict(self.r.hgetall(self.k.memory))
