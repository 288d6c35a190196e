"""The slow-log sampler: every command and script a server ran over a window, counted under
the process that sent it (its TCP socket found in /proc), a script named by its file and
timed. bench/cpu_share.py samples with it; tests check its counting."""

from __future__ import annotations

import collections
import hashlib
import os
from pathlib import Path
from typing import Any

import redis

LUA = Path(__file__).resolve().parents[2] / "bus" / "store" / "lua"
QUIET = {
    "slowlog",
    "info",
    "config",
    "cluster",
    "ping",
    "command",
    "multi",
    "exec",
}  # the sampler's own


def sockets(pids: list[int]) -> dict[str, int]:
    """``"ip:port"`` of each TCP socket a process of ``pids`` holds -> its pid."""
    inode_pid: dict[str, int] = {}
    tables: dict[str, str] = {}  # netns -> its tcp table, read once
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            # An fd closed since the listing (the listing's own, one a thread closed) is
            # skipped alone: the process's other sockets still count.
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inode_pid[link[8:-1]] = pid
        try:
            ns = os.readlink(f"/proc/{pid}/ns/net")
            if ns not in tables:
                tables[ns] = Path(f"/proc/{pid}/net/tcp").read_text()
        except OSError:
            continue
    out: dict[str, int] = {}
    for table in tables.values():
        for line in table.splitlines()[1:]:
            f = line.split()
            if f[9] in inode_pid:
                hexip, hexport = f[1].split(":")
                ip = ".".join(str(b) for b in reversed(bytes.fromhex(hexip)))
                out[f"{ip}:{int(hexport, 16)}"] = inode_pid[f[9]]
    return out


def _script_names() -> dict[str, str]:
    from bus.store.lua_files import lua_source

    return {
        hashlib.sha1(lua_source(p.stem).encode()).hexdigest(): p.stem for p in LUA.glob("*.lua")
    }


class Slowlog:
    """Every command of ``nodes`` for the window, counted per (role, command or script)."""

    def __init__(self, nodes: list[Any], roles: dict[int, str]) -> None:
        # Clients of their own that do not decode: a logged DUMP or RESTORE is binary.
        nodes = [
            redis.Redis(
                host=kw["host"], port=kw["port"], password=kw.get("password"), socket_timeout=10
            )
            for kw in (n.connection_pool.connection_kwargs for n in nodes)
        ]
        self.nodes, self.roles = nodes, roles
        self.counts: collections.Counter[tuple[str, str]] = collections.Counter()
        # Server time (µs, as the slow log times it) per command or script, whoever sent it.
        self.micros: collections.Counter[str] = collections.Counter()
        self.shas = _script_names()
        self.saved = [n.config_get("slowlog-*") for n in nodes]
        for n in nodes:
            # Raw entries: redis-py's parser fails on them inside a MULTI.
            n.set_response_callback("SLOWLOG GET", lambda r, **_kw: r)
            n.config_set("slowlog-max-len", 1_000_000)
            n.config_set("slowlog-log-slower-than", 0)
            n.slowlog_reset()
        self.addr: dict[str, int] = {}

    def poll(self) -> None:
        self.addr.update(sockets(list(self.roles)))
        for n in self.nodes:
            pipe = n.pipeline(transaction=True)  # atomic: no entry logged in between lost
            pipe.slowlog_get(-1)
            pipe.slowlog_reset()
            entries = pipe.execute()[0]
            for e in entries:  # [id, time, µs, [args], client address, client name]
                words = [w.decode(errors="replace") for w in e[3]]
                if not words or words[0].lower() in QUIET:
                    continue
                name = words[0].lower()
                if name == "evalsha" and len(words) > 1:
                    name = "lua:" + self.shas.get(words[1], words[1][:8])
                client = e[4].decode() if len(e) > 4 else ""
                # A command a script runs is logged too, from no client ("?:0"; none on
                # older servers): "(lua)".
                inner = client in ("", "?:0")
                role = "(lua)" if inner else self.roles.get(self.addr.get(client, -1), "?")
                self.counts[(role, name)] += 1
                if not inner:  # a script's own commands' time is inside its time
                    self.micros[name] += int(e[2])

    def close(self) -> None:
        for n, saved in zip(self.nodes, self.saved, strict=True):
            for k, v in saved.items():
                n.config_set(k, v)
