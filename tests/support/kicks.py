"""What a kick loop does with its list, for the tests that drive the list by hand."""

from __future__ import annotations

import os
from typing import Any

from bus.store.store import Store


def pop_kicks(
    store: Store, client: Any, host: str, loop: str, block_s: float, count: int
) -> list[str]:
    """Up to ``count`` kicks off ``host``'s list into loop ``loop``'s taken list, as a kick
    loop takes them (bus.delivery.kick_list): those already waiting without blocking, else
    the next one waited for up to ``block_s`` on ``client``, with those waiting behind it
    when it came."""
    got = store.delivery.take_kicks(host, loop, count)
    if got:
        return got
    got, waiting = store.delivery.wait_kick(client, host, loop, block_s)
    if got and waiting:
        got += store.delivery.take_kicks(host, loop, count - 1)
    return got


class FileDispatcher:
    """A child process's dispatcher (``INBOX_DISPATCHER=tests.support.kicks:FileDispatcher``): a
    line ``made`` of the file ``$INBOX_TEST_DISPATCH_LOG`` when it is made, then a line
    ``host sid`` a request."""

    def __init__(self) -> None:
        self.path = os.environ["INBOX_TEST_DISPATCH_LOG"]
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write("made\n")

    def request(self, host: str, sid: str) -> None:
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(f"{host} {sid}\n")
