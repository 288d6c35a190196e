"""Two machines: network namespaces a and b, each with its own address and host name,
nothing shared over loopback. docs/surfaces.md's "Another machine" is run as written on a
(a CA and a TLS Redis on a's address, then ``inbox up`` on it); b joins with the line a's
``inbox up`` printed. Messages go both ways, every command run with only ``INBOX_HOME``
(a joined home remembers its store). Then b's processes are killed: a's ``inbox status``
shows b ``down`` within the bound, a send to b's session says so, ``inbox doctor`` exits 1.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.netns import HostNet, kill_ns, unavailable
from tests.support.paths import REPO
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

DOWN_S = 4.0  # INBOX_HOST_DOWN_S here: the bound the test holds b's down to


def doc_blocks() -> list[str]:
    """The ``sh`` blocks of docs/surfaces.md's "Another machine", in order."""
    text = (REPO / "docs" / "surfaces.md").read_text(encoding="utf-8")
    part = text.split("### Another machine", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)```", part, re.S)


class Proc:
    """A long-running command in a host's namespace, its output lines collected."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            argv,
            env=env,
            cwd=str(REPO),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def line(self, pattern: str, timeout: float = 90) -> str:
        found = wait_for(
            lambda: next((ln for ln in self.lines if re.search(pattern, ln)), None),
            timeout=timeout,
            what=f"{pattern!r} (exit {self.proc.poll()}) in:\n" + "\n".join(self.lines),
            interval=0.1,
        )
        return str(found)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)


def _skip_why() -> str | None:
    why = unavailable()
    if why:
        return why
    for tool in ("redis-server", "openssl", "unshare", "hostname"):
        if shutil.which(tool) is None:
            return f"no {tool}"
    return None


def test_two_machines_join_over_tls_and_see_a_dead_host(tmp_path: Path) -> None:
    why = _skip_why()
    if why is not None:
        pytest.skip(f"two machines cannot be made here: {why}")
    net = HostNet(["a", "b"]).up()
    procs: list[Proc] = []
    try:
        addr_a = net.address("a")
        bin_dir = str(Path(sys.executable).parent)  # where `inbox` is installed
        base = {k: v for k, v in os.environ.items() if not k.startswith("INBOX_")}
        base.update(
            PATH=f"{bin_dir}{os.pathsep}{base.get('PATH', '')}",
            HOME=str(tmp_path / "me"),
            ADDR_A=addr_a,
            PASSWORD=secrets.token_hex(16),
            INBOX_KEY_PREFIX=f"two{secrets.token_hex(3)}",
            INBOX_WORKER_STANDBY="0",
            INBOX_SCHEDULER_STANDBY="0",
            INBOX_HOST_DOWN_S=str(DOWN_S),
            INBOX_WAKE_DEBOUNCE_S="0.3",
        )
        (tmp_path / "me").mkdir()
        env = {h: {**base, "INBOX_HOME": str(tmp_path / f"home-{h}")} for h in ("a", "b")}

        def on(host: str, command: str) -> list[str]:
            """``command`` (shell) on machine ``host``: its namespace and host name."""
            return net.wrap(host, ["unshare", "--uts", "sh", "-c", f"hostname {host}; {command}"])

        def inbox(host: str, *args: str) -> subprocess.CompletedProcess[str]:
            line = "inbox " + " ".join(shlex.quote(a) for a in args)
            return subprocess.run(
                on(host, line), env=env[host], capture_output=True, text=True, timeout=120
            )

        certs_and_redis, up_a = doc_blocks()
        make_certs, redis_line = certs_and_redis.strip().splitlines()
        made = subprocess.run(
            on("a", make_certs), env=env["a"], cwd=REPO, capture_output=True, text=True, timeout=60
        )
        assert made.returncode == 0, made.stderr
        procs.append(redis := Proc(on("a", redis_line), env["a"]))
        redis.line(r"Ready to accept connections|ready to accept", timeout=30)

        procs.append(first := Proc(on("a", up_a.strip()), env["a"]))
        first.line(r"^inbox up: host a, store rediss://\*\*\*@")
        first.line(r"join from another machine")
        join = first.line(r"^\s+INBOX_REDIS_URL=.* inbox up$").strip()
        assert f"@{addr_a}:6380/" in join and "ssl_cert_reqs=required" in join
        assert not any("warning: the store is served in clear" in ln for ln in first.lines)

        procs.append(second := Proc(on("b", join), env["b"]))
        second.line(r"^inbox up: host b, store rediss://")
        kept = Path(env["b"]["INBOX_HOME"]) / "store.env"
        assert kept.stat().st_mode & 0o777 == 0o600

        # Every command below has only INBOX_HOME: each home remembers its store.
        def both_up() -> object:
            got = inbox("a", "status")
            rows = json.loads(got.stdout).get("workers", []) if got.returncode == 0 else []
            return {r["name"] for r in rows if r["state"] == "up"} >= {"a", "b"}

        wait_for(both_up, timeout=90, what="both hosts' workers up", interval=0.5)
        assert inbox("a", "session", "open", "alice").returncode == 0
        opened = inbox("b", "session", "open", "bob")
        assert opened.returncode == 0, opened.stdout + opened.stderr

        def heard(host: str, sid: str, msg_id: str) -> object:
            got = inbox(host, "peek", sid)
            lines = json.loads(got.stdout) if got.returncode == 0 else []
            return [m for m in lines if msg_id in m.get("notice", {}).get("messages", [])]

        for frm, to, sid in (("a", "b", "bob"), ("b", "a", "alice")):
            sent = inbox(frm, "send", "--to-id", sid, "--from", f"{frm}:me", "--text", "hi")
            assert sent.returncode == 0, sent.stdout + sent.stderr
            answer: dict[str, Any] = json.loads(sent.stdout)
            assert answer["recipient"]["host_state"] == "up" and sent.stderr == ""
            wait_for(
                lambda to=to, sid=sid, i=answer["id"]: heard(to, sid, i),  # type: ignore[misc]
                timeout=60,
                what=f"the notice on {to}'s floor",
                interval=0.5,
            )

        # Machine b dies: every process in its namespace killed at once.
        kill_ns(net.ns("b"))
        killed = time.monotonic()

        def b_down() -> object:
            rows = json.loads(inbox("a", "status").stdout)["workers"]
            return next((r for r in rows if r["name"] == "b" and r["state"] == "down"), None)

        wait_for(b_down, timeout=DOWN_S + 30, what="b down in a's status", interval=0.5)
        # Within the bound (plus a beat and the status command's own start).
        assert time.monotonic() - killed < DOWN_S + 2.0 + 15.0

        sent = inbox("a", "send", "--to-id", "bob", "--from", "a:me", "--text", "still there?")
        assert sent.returncode == 0, sent.stderr
        assert json.loads(sent.stdout)["recipient"]["host_state"] == "down"
        assert sent.stderr.count("\n") == 1 and "host b is down" in sent.stderr

        doctor = inbox("a", "doctor")
        assert doctor.returncode == 1, doctor.stdout + doctor.stderr
        problems = json.loads(doctor.stdout)["problems"]
        assert {"check": "host", "host": "b"}.items() <= next(
            p for p in problems if p["check"] == "host"
        ).items()
    finally:
        for p in reversed(procs):
            p.kill()
        for host in ("a", "b"):
            kill_ns(net.ns(host))
        net.close()
