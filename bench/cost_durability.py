"""bench/cost.py's **durability** row: what each level of ``INBOX_DURABILITY`` costs a send.

One primary of the engine's server (``bus.ops.embedded.server_binary``, or
``INBOX_SERVER_BINARY``) with its append-only file as ``inbox up`` runs it (``appendfsync
everysec``) and one replica, both on loopback TCP in a temporary folder on the machine's
disk. For each level: the median and p95 wall of one ``Bus.send`` (``single``) and the
wall of one ``Bus.send_many`` of ``batch`` messages, per message; beside them ``disk``
on the same primary switched to ``appendfsync always`` (every write fsynced before its
reply: what a server without WAITAOF needs for ``disk``).

    python bench/cost_durability.py [--sends 300] [--batch 1000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import redis  # noqa: E402

from bus.api import Bus  # noqa: E402
from bus.core.settings import Settings  # noqa: E402
from bus.delivery.dispatch import RecordingDispatcher  # noqa: E402
from bus.ops.embedded import server_binary  # noqa: E402
from tests.support.local_servers import free_port  # noqa: E402


def _start(binary: str, data: Path, *args: str) -> tuple[subprocess.Popen[bytes], int]:
    data.mkdir(parents=True)
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data), "--save", "",
         *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    client = redis.Redis(port=port)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            return proc, port
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                proc.kill()
                raise
            time.sleep(0.02)


def _level(b: Bus, level: str, sends: int, batch: int) -> dict[str, Any]:
    walls = []
    for i in range(sends):
        t = time.perf_counter()
        b.send({"from": "h:a", "to_id": "bob", "text": f"{level} {i}"}, durability=level)
        walls.append((time.perf_counter() - t) * 1000)
    walls.sort()
    items = [{"from": "h:a", "to_id": "bob", "text": f"{level} b{i}"} for i in range(batch)]
    t = time.perf_counter()
    b.send_many(items, durability=level)
    per = (time.perf_counter() - t) * 1000 / batch
    return {
        "single_median_ms": round(statistics.median(walls), 3),
        "single_p95_ms": round(walls[int(len(walls) * 0.95) - 1], 3),
        "batch_per_msg_ms": round(per, 4),
    }


def measure(tmp: Path, sends: int, batch: int) -> dict[str, Any]:
    """Each level's figures (see the module)."""
    binary = server_binary()
    primary, pport = _start(binary, tmp / "p", "--appendonly", "yes", "--appendfsync", "everysec")
    replica, _rport = _start(binary, tmp / "r", "--replicaof", "127.0.0.1", str(pport))
    try:
        url = f"redis://127.0.0.1:{pport}/0"
        r = redis.Redis(port=pport, decode_responses=True)
        deadline = time.monotonic() + 20
        while (r.info("replication").get("slave0") or {}).get("state") != "online":
            if time.monotonic() > deadline:
                raise RuntimeError("the replica did not connect")
            time.sleep(0.05)
        s = Settings(
            home=tmp / "home", host="h", redis_url=url, broker_url=url, key_prefix="d",
            send_rate=1e9, send_burst=1e9, max_unread=10**9,
        )  # fmt: skip
        b = Bus(s, dispatcher=RecordingDispatcher())
        b.open_session("bob", handle="h:bob")
        b.send({"from": "h:a", "to_id": "bob", "text": "warm"})
        out: dict[str, Any] = {"server": r.info("server").get("valkey_version")
                               or r.info("server").get("redis_version")}  # fmt: skip
        for level in ("memory", "disk", "replica"):
            out[level] = _level(b, level, sends, batch)
        r.config_set("appendfsync", "always")
        out["disk_fsync_always"] = _level(b, "disk", sends, batch)
        return out
    finally:
        for proc in (replica, primary):
            proc.kill()
            proc.wait(10)


def table(res: dict[str, Any]) -> str:
    base = res["memory"]
    rows = [f"durability ({res['server']}, appendfsync everysec, one replica on loopback):",
            "  level                  send median   p95        batch/msg   send vs memory"]  # fmt: skip
    for name in ("memory", "disk", "replica", "disk_fsync_always"):
        f = res[name]
        ratio = f["single_median_ms"] / base["single_median_ms"]
        rows.append(
            f"  {name:<22} {f['single_median_ms']:>8.3f} ms {f['single_p95_ms']:>8.3f} ms"
            f" {f['batch_per_msg_ms']:>9.4f} ms   {ratio:.2f}x"
        )
    return "\n".join(rows)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--sends", type=int, default=300)
    p.add_argument("--batch", type=int, default=1000)
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="inbox-durability-") as d:
        res = measure(Path(d), a.sends, a.batch)
    print(table(res))
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
