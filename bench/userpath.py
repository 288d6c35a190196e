"""The user's paths into the bus, for ``bench/swarm.py``: ``inbox send --jsonl`` and
``POST /v1/send/batch``, each as a user runs it (a process of its own, the gateway a
server of its own), ingest alone and end to end.

- **cli**: one ``inbox send --jsonl FILE`` process (its start included), its answers
  written to a file, timed from its start until it exits;
- **http**: an ``inbox serve`` process; one client posts the messages in batches of
  :data:`HTTP_BATCH` over one kept-alive connection, timed from the first post until the
  last answer;
- **end to end** through each: running sessions on the bench host, each with a listener
  on its socket that acks (``swarm.Ears``); from the start of the send until every
  message is in a notice a listener received.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.burst import BenchError, wait_until
from bus.api import Bus
from bus.core.settings import SOURCE_ROOT, Settings
from tests.support.local_servers import free_port

HTTP_BATCH = 5000


def _env(s: Settings) -> dict[str, str]:
    return s.child_env()


def cli_send(s: Settings, items: list[dict[str, Any]], tmp: Path) -> float:
    """Seconds of one ``inbox send --jsonl FILE`` of ``items``; every answer checked."""
    src = tmp / f"send-{time.monotonic_ns()}.jsonl"
    out = src.with_suffix(".answers")
    src.write_text("".join(json.dumps(m) + "\n" for m in items))
    t0 = time.perf_counter()
    with out.open("wb") as fh:
        proc = subprocess.run(
            [sys.executable, "-m", "bus.surfaces.cli.app", "send", "--jsonl", str(src)],
            env=_env(s),
            cwd=str(SOURCE_ROOT),
            stdout=fh,
            stderr=subprocess.PIPE,
            timeout=900,
        )
    secs = time.perf_counter() - t0
    if proc.returncode != 0:
        raise BenchError(f"inbox send --jsonl exited {proc.returncode}: {proc.stderr[-500:]!r}")
    answers = out.read_text().splitlines()
    stored = sum(1 for line in answers if json.loads(line).get("ok"))
    if stored != len(items):
        raise BenchError(f"inbox send --jsonl stored {stored} of {len(items)}")
    src.unlink()
    out.unlink()
    return secs


class Gateway:
    """``inbox serve`` on a free loopback port, and one kept-alive client of it."""

    def __init__(self, s: Settings) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bus.surfaces.cli.app", "serve", "--port", str(self.port)],
            env=_env(s),
            cwd=str(SOURCE_ROOT),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.conn: http.client.HTTPConnection | None = None
        wait_until(self._up, 60, "the gateway's /health", 0.1)

    def _up(self) -> bool:
        if self.proc.poll() is not None:
            raise BenchError(f"inbox serve exited {self.proc.returncode}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
            c.request("GET", "/health")
            ok = c.getresponse().status == 200
            c.close()
            return ok
        except OSError:
            return False

    def post(self, batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
        body = json.dumps(batch).encode()
        self.conn.request(
            "POST", "/v1/send/batch", body=body, headers={"Content-Type": "application/json"}
        )
        resp = self.conn.getresponse()
        data = json.loads(resp.read())
        if resp.status != 200 or not data.get("ok"):
            raise BenchError(f"POST /v1/send/batch answered {resp.status}: {str(data)[:300]}")
        return list(data["answers"])

    def send(self, items: list[dict[str, Any]]) -> float:
        """Seconds from the first post until the last answer; every answer checked."""
        t0 = time.perf_counter()
        stored = 0
        for at in range(0, len(items), HTTP_BATCH):
            stored += sum(1 for a in self.post(items[at : at + HTTP_BATCH]) if a.get("ok"))
        secs = time.perf_counter() - t0
        if stored != len(items):
            raise BenchError(f"POST /v1/send/batch stored {stored} of {len(items)}")
        return secs

    def stop(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def ingest(
    s: Settings, observer: Bus, how: str, items: list[dict[str, Any]], tmp: Path
) -> dict[str, Any]:
    """Ingest alone through ``how`` (``cli`` or ``http``): the items' sessions have a host
    with no worker, so nothing else runs; the queues are checked to hold every message."""
    before = _queued(observer, items)
    if how == "cli":
        secs = cli_send(s, items, tmp)
    else:
        gw = Gateway(s)
        try:
            secs = gw.send(items)
        finally:
            gw.stop()
    stored = _queued(observer, items) - before
    if stored != len(items):
        raise BenchError(f"{how} ingest queued {stored} of {len(items)} messages")
    n = len(items)
    return {"how": how, "messages": n, "s": round(secs, 3), "per_s": round(n / secs, 1)}


def _queued(observer: Bus, items: list[dict[str, Any]]) -> int:
    sids = sorted({str(m["to_id"]) for m in items})
    pipe = observer.store.r.pipeline(transaction=False)
    for sid in sids:
        pipe.xlen(observer.store.k.s(sid, "stream"))
    return sum(int(n) for n in pipe.execute())


def e2e(
    s: Settings,
    how: str,
    items: list[dict[str, Any]],
    tmp: Path,
    wait_heard: Callable[[float], bool],
) -> dict[str, Any]:
    """End to end through ``how``: from the start of the send until ``wait_heard`` says
    every message is in a notice a listener received (its argument: seconds to wait)."""
    gw = Gateway(s) if how == "http" else None
    try:
        t0 = time.perf_counter()
        send_s = cli_send(s, items, tmp) if gw is None else gw.send(items)
        if not wait_heard(900):
            raise BenchError(f"end to end through {how}: not every message was noticed")
        secs = time.perf_counter() - t0
    finally:
        if gw is not None:
            gw.stop()
    n = len(items)
    return {
        "how": how,
        "messages": n,
        "send_s": round(send_s, 3),
        "s": round(secs, 3),
        "per_s": round(n / secs, 1),
    }


__all__ = ["HTTP_BATCH", "Gateway", "cli_send", "e2e", "ingest"]
