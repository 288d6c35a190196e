"""The HTTP gateway served for real: uvicorn in a background thread on a loopback port
bound before it starts (no port race), with an httpx client on it."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import httpx
import uvicorn
from fastapi.testclient import TestClient

from bus.api import Bus
from bus.surfaces.http.gateway import create_app


class Server:
    """A uvicorn server for ``app`` in a thread, bound before it starts."""

    def __init__(self, app: Any, **config: Any) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(
            uvicorn.Config(app, log_level="warning", lifespan="off", **config)
        )
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "server did not start"
            time.sleep(0.01)
        self.client = httpx.Client(base_url=self.url, timeout=10)

    def stop(self) -> None:
        self.client.close()
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


def wire(**kw: Any) -> dict[str, Any]:
    """A message as the gateway takes it, ``kw`` over a plain one from neo:sip to s1."""
    return {"from": "neo:sip", "to_id": "s1", "text": "look at the diff", **kw}


def app_client(b: Bus) -> TestClient:
    """This bus's gateway in-process (no server, no port), as a loopback client reaches it."""
    return TestClient(create_app(b), base_url="http://127.0.0.1")


def bearer(token: str) -> dict[str, str]:
    """The header that carries ``token``."""
    return {"Authorization": f"Bearer {token}"}
