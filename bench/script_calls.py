"""The commands each Lua script runs inside itself, on the sparse row's bus system.

``.venv/bin/python bench/script_calls.py [--seconds 20] [--rate 20]``: the sparse row's bus
system alone (``bench/cost_sparse.py``: ``inbox up`` on its own server of the embedded
engine, 200 listening sessions, ``Bus.send`` from seven sender sessions), one window of
Poisson traffic watched with ``MONITOR``. Each ``EVALSHA`` is named by its script (the
SHA1 of ``lua_source``), and the ``[lua]`` lines that follow it are its own commands (the
server runs one command at a time). Prints, per script: calls a message, commands a call
and those commands by name.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
import tempfile
import threading
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.cost_sparse import Traffic, arrivals, run_window, start_system
from bus.store.lua_files import LUA_DIR, lua_source

_LINE = re.compile(r'^[\d.]+ \[\d+ ([^\]]*)\] "([^"]*)"(?: "([^"]*)")?')


def script_names() -> dict[str, str]:
    """SHA1 of each script as the store loads it -> its file's name."""
    out = {}
    for path in LUA_DIR.glob("*.lua"):
        src = lua_source(path.stem)
        out[hashlib.sha1(src.encode()).hexdigest()] = path.stem
    return out


class Watch:
    """``MONITOR`` on ``url`` in a thread: per script, its calls and its own commands."""

    def __init__(self, url: str) -> None:
        self.names = script_names()
        self.calls: Counter[str] = Counter()
        self.inner: dict[str, Counter[str]] = {}
        self.stopping = threading.Event()
        self.client = redis.Redis.from_url(url)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with self.client.monitor() as m:
            current = ""
            while not self.stopping.is_set():
                raw = m.connection.read_response()
                line = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
                got = _LINE.match(line)
                if not got:
                    continue
                who, cmd, arg = got[1], got[2].upper(), got[3] or ""
                if who == "lua":
                    self.inner.setdefault(current, Counter())[cmd] += 1
                elif cmd in ("EVALSHA", "EVALSHA_RO"):
                    current = self.names.get(arg, arg[:8])
                    self.calls[current] += 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--rate", type=float, default=20.0)
    a = ap.parse_args()
    t = Traffic(rate=a.rate, seconds=a.seconds, rounds=1)
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        s = start_system("bus", Path(tmp), t, stack)
        w = Watch(s.server.url)
        due = arrivals(t, a.seconds, t.seed)
        win = run_window(s, due, "calls")
        w.stopping.set()
        s.server.commands()  # a command more wakes the monitor's read
        w.thread.join(10)
    n = win.messages
    total = sum(sum(c.values()) for c in w.inner.values())
    print(f"{n} messages; commands inside scripts a message: {total / n:.1f}")
    for name, calls in w.calls.most_common():
        inner = w.inner.get(name, Counter())
        per = sum(inner.values()) / calls
        top = ", ".join(f"{k} {v / calls:.2g}" for k, v in inner.most_common(20))
        print(f"{name:<22} {calls / n:5.2f} a message  {per:5.1f} a call  ({top})")


if __name__ == "__main__":
    main()
