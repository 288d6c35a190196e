"""The write commands' warm start (bus.surfaces.command_server) answers as a cold ``inbox``.

A table of good and bad ``send``, ``reply``, ``withdraw`` and ``decide`` inputs runs as
real ``inbox`` processes twice, each time on a fresh key prefix set up the same way: once
cold (``INBOX_FAST_SEND=0``, the library imported by the process) and once handed to a
running server; stdout, stderr and the exit code must be the same. Each warm run is made
under ``python -X importtime``, which proves the server ran it: the process itself never
imported the library. The few names the client mirrors are held equal to the server's.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import redis

from bus.api import Bus
from bus.core import lane_names
from bus.core.settings import Settings
from bus.delivery.dispatch import RecordingDispatcher
from bus.lanes import send as command_client
from bus.surfaces import command_server
from tests.support.import_trace import LIBRARY, heavy, imported

INBOX = Path(sys.executable).parent / "inbox"
ID1 = "11111111-1111-4111-8111-111111111111"
ID2 = "22222222-2222-4222-8222-222222222222"
ID3 = "33333333-3333-4333-8333-333333333333"
ID4 = "44444444-4444-4444-8444-444444444444"
pytestmark = pytest.mark.usefixtures("standalone_store")


@pytest.fixture
def server(home: Path, settings: Settings) -> Iterator[Path]:
    """A command server for ``home``; its socket once it listens."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "bus.surfaces.command_server"],
        env=settings.child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # "ready" once it listens, EOF if it died
        assert "ready" in line, line + proc.stdout.read()
        yield command_server.socket_path(home)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _bus(settings: Settings, prefix: str) -> Bus:
    return Bus(replace(settings, key_prefix=prefix), dispatcher=RecordingDispatcher())


def _world(settings: Settings, prefix: str) -> dict[str, str]:
    """The same sessions, messages and typed thread on ``prefix``; its threads' ids."""
    b = _bus(settings, prefix)
    try:
        for sid in ("alice", "bob", "carol"):
            b.open_session(sid, handle=f"hosta:{sid}")
        # A delivery loop of the host is alive, so a send's kick goes on the kick list.
        b.store.delivery.kick_alive("hosta", 600_000)
        sent = b.send({"from": "hosta:alice", "to_id": "bob", "text": "first", "id": ID4})
        asked = _bus(replace(settings, session="alice"), prefix).request(
            "bob", "task", "take this over"
        )
        return {"thread": sent["thread"], "typed": asked["thread"]}
    finally:
        b.store.r.close()


# (name, argv, stdin, extra environment). {thread} and {typed} are the world's threads.
CASES: list[tuple[str, list[str], str, dict[str, str]]] = [
    (
        "send",
        ["send", "--to-id", "bob", "--from", "hosta:alice", "--text", "hi", "--id", ID1],
        "",
        {},
    ),
    (
        "send by handle, default sender",
        ["send", "--to", "hosta:bob", "--text", "yo", "--id", ID2],
        "",
        {},
    ),
    (
        "send as INBOX_SESSION",
        ["send", "--to-id", "carol", "--text", "hi", "--id", ID3],
        "",
        {"INBOX_SESSION": "alice"},
    ),
    (
        "resend is a duplicate",
        ["send", "--to-id", "bob", "--from", "hosta:alice", "--text", "first", "--id", ID4],
        "",
        {},
    ),
    ("no recipient", ["send", "--from", "hosta:alice", "--text", "x"], "", {}),
    ("no text", ["send", "--to-id", "bob", "--from", "hosta:alice"], "", {}),
    ("blank text", ["send", "--to-id", "bob", "--text", "   "], "", {}),
    ("bad class", ["send", "--to-id", "bob", "--text", "x", "--class", "nope"], "", {}),
    ("too long", ["send", "--to-id", "bob", "--text", "x" * 8001], "", {}),
    ("bad id", ["send", "--to-id", "bob", "--text", "x", "--id", "not an id"], "", {}),
    (
        "bounced",
        ["send", "--to-id", "ghost", "--from", "hosta:alice", "--text", "x", "--id", ID1],
        "",
        {},
    ),
    ("unknown handle", ["send", "--to", "nohost:who", "--text", "x"], "", {}),
    ("unknown option", ["send", "--bogus"], "", {}),
    ("bad durability", ["send", "--to-id", "bob", "--text", "x", "--durability", "fsync"], "", {}),
    ("bad INBOX_SESSION", ["send", "--to-id", "bob", "--text", "x"], "", {"INBOX_SESSION": "a b"}),
    (
        "token required",
        ["send", "--to-id", "bob", "--from", "hosta:alice", "--text", "x"],
        "",
        {"INBOX_SECRET": "s3cret"},
    ),
    ("bad setting", ["send", "--to-id", "bob", "--text", "x"], "", {"INBOX_SEND_RATE": "fast"}),
    (
        "rate limited",
        ["send", "--to-id", "bob", "--from", "hosta:alice", "--text", "x", "--id", ID1],
        "",
        {"INBOX_SEND_BURST": "0.5", "INBOX_SEND_RATE": "0.001"},
    ),
    (
        "jsonl",
        ["send", "--jsonl", "-"],
        json.dumps({"from": "hosta:alice", "to_id": "bob", "text": "a", "id": ID2})
        + "\n{not json\n"
        + json.dumps({"from": "hosta:alice", "to_id": "bob", "text": ""})
        + "\n",
        {},
    ),
    ("help", ["send", "--help"], "", {}),
    ("reply", ["reply", "bob", "{typed}", "--text", "back"], "", {}),
    ("reply, not a party", ["reply", "carol", "{typed}", "--text", "x"], "", {}),
    ("reply, thread not delivered yet", ["reply", "bob", "{thread}", "--text", "x"], "", {}),
    ("reply, no thread", ["reply", "bob", "thr_nope", "--text", "x"], "", {}),
    ("withdraw, not the sender", ["withdraw", ID3, "--by", "bob"], "", {}),
    ("withdraw", ["withdraw", ID3, "--by", "alice"], "", {}),
    ("withdraw, sent by a handle alone", ["withdraw", ID4, "--by", "alice"], "", {}),
    ("withdraw, no such message", ["withdraw", "nope", "--by", "alice"], "", {}),
    ("decide", ["decide", "{typed}", "accept"], "", {"INBOX_SESSION": "bob"}),
    ("decide, bad decision", ["decide", "{typed}", "maybe"], "", {"INBOX_SESSION": "bob"}),
    ("decide, no session", ["decide", "{typed}", "accept"], "", {}),
]

_FIXED = (ID1, ID2, ID3, ID4)  # ids a case gives; any other was made by the run
_VOLATILE = ("envelope_id", "last_seen", "ts", "created_ms", "at_ms", "sent_ms", "expires_ms")


def _stable(text: str, threads: dict[str, str]) -> str:
    """Each JSON line with its times blanked and this world's thread ids named."""
    out = []
    for line in text.splitlines():
        for name, tid in threads.items():
            line = line.replace(tid, "{" + name + "}")
        try:
            doc = json.loads(line)
        except ValueError:
            out.append(line)
            continue
        out.append(json.dumps(_blank(doc), sort_keys=True))
    return "\n".join(out)


def _blank(doc: Any) -> Any:
    if isinstance(doc, dict):
        return {
            k: ("*" if k in _VOLATILE or (k == "id" and v not in _FIXED) else _blank(v))
            for k, v in doc.items()
        }
    if isinstance(doc, list):
        return [_blank(v) for v in doc]
    return doc


def _run(
    env: dict[str, str], argv: list[str], stdin: str, warm: bool
) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    if warm:
        return imported(env, *argv) if not stdin else _with_stdin(env, argv, stdin)
    out = subprocess.run(
        [str(INBOX), *argv],
        env={**env, command_client.OFF_VAR: "0"},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return out, set()


def _with_stdin(
    env: dict[str, str], argv: list[str], stdin: str
) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    from tests.support.import_trace import IMPORT_LINE

    out = subprocess.run(
        [sys.executable, "-X", "importtime", str(INBOX), *argv],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return out, set(IMPORT_LINE.findall(out.stderr))


def _clean_err(err: str) -> str:
    return "\n".join(ln for ln in err.splitlines() if not ln.startswith("import time:"))


def test_the_warm_start_answers_every_input_as_the_cold_command(
    server: Path, settings: Settings, redis_url: str
) -> None:
    prefixes = {False: settings.key_prefix + "c", True: settings.key_prefix + "w"}
    worlds = {warm: _world(settings, p) for warm, p in prefixes.items()}
    try:
        for name, argv, stdin, extra in CASES:
            got = {}
            for warm, prefix in prefixes.items():
                env = {**replace(settings, key_prefix=prefix).child_env(), **extra}
                args = [a.format(**worlds[warm]) for a in argv]
                out, modules = _run(env, args, stdin, warm)
                if warm and "--jsonl" in argv:  # a long command runs in its own process
                    assert "bus.api" in modules, f"{name}: ran in the server"
                elif warm:
                    assert "bus.lanes.send" in modules, name
                    assert heavy(modules, LIBRARY) == [], f"{name}: ran in the client"
                got[warm] = (
                    out.returncode,
                    _stable(out.stdout, worlds[warm]),
                    _stable(_clean_err(out.stderr), worlds[warm]),
                )
            assert got[True] == got[False], name
        # Both dispatched the same deliveries to the worker (its kick list, the default).
        kicks = {}
        for warm, p in prefixes.items():
            store = _bus(settings, p).store
            kicks[warm] = store.r.lrange(store.k.kick_list("hosta"), 0, -1)
            store.r.close()
        assert kicks[True] == kicks[False] != []
    finally:
        client = redis.Redis.from_url(redis_url)
        for p in prefixes.values():
            for key in client.scan_iter(match=f"{p}:*", count=1000):
                client.delete(key)
        client.close()


def test_without_a_server_the_command_runs_cold(settings: Settings, home: Path) -> None:
    b = _bus(settings, settings.key_prefix)
    b.open_session("bob")
    out, modules = imported(
        settings.child_env(), "send", "--to-id", "bob", "--from", "hosta:a", "--text", "hi"
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["state"] == "stored"
    assert "bus.api" in modules
    assert not command_server.socket_path(home).exists()


def test_a_server_of_another_install_hands_the_command_back(
    server: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The header names the file of bus.core.lane_names as the client imported it; a server
    # whose own is another answers "full" and nothing runs there.
    monkeypatch.setattr(lane_names, "__file__", "/elsewhere/bus/core/lane_names.py")
    assert command_client.run(["send", "--help"], str(server.parent.parent)) is None


def test_a_header_round_trips(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INBOX_X", "a=b")
    data = command_client.header(["send", "--text", "é"])
    req = command_server.parse_header(data[10:])
    assert int(data[:10]) == len(data) - 10
    assert req.argv == ["send", "--text", "é"]
    assert req.env[b"INBOX_X"] == b"a=b"
    assert (req.client, req.python) == command_server.client_id()


def test_a_client_that_goes_away_interrupts_its_command(
    server: Path, settings: Settings, home: Path
) -> None:
    # A store that accepts and never answers holds the command in the worker; the client
    # is then killed, as a Ctrl-C would end it.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    silent.settimeout(60)
    env = {
        **settings.child_env(),
        "INBOX_REDIS_URL": f"redis://127.0.0.1:{silent.getsockname()[1]}/0",
        "INBOX_REDIS_TIMEOUT_S": "120",
    }
    client = subprocess.Popen(
        [str(INBOX), "send", "--to-id", "bob", "--from", "hosta:a", "--text", "hi"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        conn, _ = silent.accept()  # the worker's store connection: the command runs
        conn.settimeout(60)
        client.kill()
        client.wait(30)
        # The worker was interrupted: it drops its store connection (what it asked first,
        # then the end; a recv past 60 s raises).
        while conn.recv(65536):
            pass
    finally:
        if client.poll() is None:
            client.kill()
        silent.close()
    # The server still answers (a fresh worker took the leaving one's place).
    ok = subprocess.run(
        [str(INBOX), "send", "--help"], env=settings.child_env(), capture_output=True, timeout=60
    )
    assert ok.returncode == 0


def test_a_client_gone_mid_command_interrupts_it_through_the_kernel_s_signal() -> None:
    before = signal.getsignal(signal.SIGIO)
    ours, theirs = socket.socketpair()
    try:
        watcher = command_server._Watcher()
        if not watcher.by_signal:
            pytest.skip("this platform cannot have a socket signal its owner")
        req = command_server._Request(ours, None, watcher)
        req.running = True
        watcher.watch(req)  # the client is there: nothing happens
        assert not req.gone
        with pytest.raises(KeyboardInterrupt):
            theirs.close()  # its Ctrl-C, while the command waits on something
            threading.Event().wait(30)
        assert req.gone
        req.running = False
        watcher._on_io()  # a command no longer running is never interrupted
    finally:
        ours.close()
        theirs.close()
        # Not back to the default: SIGIO's default ends the process.
        signal.signal(signal.SIGIO, signal.SIG_IGN if before == signal.SIG_DFL else before)


def test_without_the_signal_one_thread_watches_each_running_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delattr(command_server.fcntl, "F_SETOWN", raising=False)
    interrupted = threading.Event()
    before = signal.signal(signal.SIGINT, lambda *_: interrupted.set())
    ours, theirs = socket.socketpair()
    try:
        watcher = command_server._Watcher()
        assert not watcher.by_signal
        req = command_server._Request(ours, None, watcher)
        req.running = True
        watcher.watch(req)
        theirs.close()
        assert interrupted.wait(30) and req.gone
    finally:
        signal.signal(signal.SIGINT, before)
        ours.close()
        theirs.close()


def _raw(path: Path, argv: list[str]) -> socket.socket:
    """A client's request sent by hand, with this process's descriptors 0-2."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(60)
    sock.connect(str(path))
    data = command_client.header(argv)
    sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, command_client._fds())])
    return sock


def test_idle_and_stuck_clients_hold_no_worker(server: Path, settings: Settings) -> None:
    b = _bus(settings, settings.key_prefix)
    b.open_session("bob")
    # More idle connections than workers, and as many that sent half a header.
    idle = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(8)]
    for n, sock in enumerate(idle):
        sock.settimeout(60)
        sock.connect(str(server))
        if n % 2:
            sock.sendall(command_client.header(["send"])[:20])
    try:
        warm, modules = imported(
            settings.child_env(), "send", "--to-id", "bob", "--from", "hosta:a", "--text", "hi"
        )
        assert warm.returncode == 0, warm.stderr
        assert json.loads(warm.stdout)["state"] == "stored"
        assert "bus.api" not in modules  # the server ran it: no idle client held it off
        # Each is closed once its bound passes, its request never whole.
        for sock in idle:
            assert sock.recv(16) == b""
    finally:
        for sock in idle:
            sock.close()


@pytest.mark.parametrize("argv", [["watch", "bob"], ["mcp"]])
def test_only_the_write_commands_are_taken(server: Path, argv: list[str]) -> None:
    with _raw(server, argv) as sock:
        assert sock.recv(16) == b"full"  # nothing ran: the client would run it itself
        assert sock.recv(16) == b""


def test_a_client_that_never_says_go_is_dropped_and_nothing_runs(server: Path) -> None:
    with _raw(server, ["send", "--help"]) as sock:
        assert sock.recv(1) == b"+"
        assert sock.recv(16) == b""  # no "g" within the bound: closed, nothing ran


def test_a_leaving_worker_runs_what_it_took_and_closes_the_rest(tmp_path: Path) -> None:
    from bus.surfaces.command_intake import Intake

    path = tmp_path / "c.sock"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    srv.listen(8)
    intake = Intake(
        srv, owner=lambda _c: True, accept=command_server.taken, max_header=1 << 20, take_s=30
    )
    taken: list[tuple[socket.socket, object, list[int]]] = []
    first = threading.Thread(target=lambda: taken.append(intake.next()))
    idle = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    idle.settimeout(60)
    idle.connect(str(path))
    with _raw(path, ["send", "--text", "late"]) as late, _raw(path, ["reply"]) as now:
        first.start()
        assert late.recv(1) == b"+" and now.recv(1) == b"+"
        now.sendall(b"g")
        first.join(60)
        [(conn, request, fds)] = taken
        assert request.argv == ["reply"] and len(fds) == 3  # type: ignore[attr-defined]
        late.sendall(b"g")  # its go comes while the worker is leaving: still run there
        [(left, left_request, left_fds)] = intake.finish()
        assert left_request.argv == ["send", "--text", "late"]  # type: ignore[attr-defined]
        assert idle.recv(16) == b""  # nothing taken: closed, its client runs it itself
    for sock in (conn, left, idle, srv):
        sock.close()
    for fd in [*fds, *left_fds]:
        os.close(fd)
