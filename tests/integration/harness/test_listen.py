"""The reference listener: acks, dedupe, stale sockets, the CLI runner (real unix sockets)."""

from __future__ import annotations

import io
import json
import os
import socket
import stat
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from bus.core.errors import Refused
from bus.delivery.floor import Floor
from bus.surfaces.harness.listener import Listener, run_listener
from tests.support.listeners import collect

SID = "sess-1"


def msg(i: int, **kw: Any) -> dict[str, Any]:
    return {
        "v": 1,
        "id": f"m{i}",
        "ts": 1,
        "from": "neo:sip",
        "to_id": SID,
        "text": f"hi {i}",
        **kw,
    }


def talk(path: Path, payload: bytes, acks: int) -> list[Any]:
    """Send raw bytes and read ``acks`` ack lines back."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(os.fspath(path))
        s.sendall(payload)
        buf = b""
        while buf.count(b"\n") < acks:
            chunk = s.recv(4096)
            if not chunk:
                break
            buf += chunk
    return [json.loads(ln) for ln in buf.splitlines()]


@pytest.fixture
def fl(tmp_path: Path) -> Floor:
    return Floor(tmp_path)


def test_binds_private_socket_and_removes_it_on_stop(fl: Floor, tmp_path: Path) -> None:
    lis = Listener.for_session(fl, SID, lambda o: True)
    with lis:
        st = os.stat(lis.path)
        assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
        assert stat.S_IMODE(os.stat(tmp_path / "inbox" / SID).st_mode) == 0o700
    assert not lis.path.exists()
    lis.stop()  # idempotent


def test_creates_a_missing_dir_0700(tmp_path: Path) -> None:
    d = tmp_path / "fresh"
    with Listener(d, lambda o: True):
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o700


def test_acks_per_line_and_dedupes_by_id(fl: Floor) -> None:
    got: list[str] = []

    def on_line(obj: dict[str, Any]) -> bool:
        got.append(obj["id"])
        return obj.get("text") != "refuse me"

    with Listener.for_session(fl, SID, on_line) as lis:
        lines = [msg(1), msg(2), msg(1), msg(3, text="refuse me")]
        payload = b"".join(json.dumps(x).encode() + b"\n" for x in lines)
        payload += b"not json\n[1]\n\n"
        acks = talk(lis.path, payload, acks=6)
        assert acks == [{"ok": True}] * 3 + [{"ok": False}] * 3
        # m3 was refused, so it is not remembered: a retry is handed on again.
        assert talk(lis.path, json.dumps(msg(3)).encode() + b"\n", acks=1) == [{"ok": True}]
    assert got == ["m1", "m2", "m3", "m3"]


def test_dedupe_remembers_only_the_last_n(fl: Floor) -> None:
    got: list[str] = []
    with Listener.for_session(fl, SID, collect(got, "id"), remember=2) as lis:
        for i in (1, 2, 3, 1, 3):
            assert talk(lis.path, json.dumps(msg(i)).encode() + b"\n", 1) == [{"ok": True}]
    assert got == ["m1", "m2", "m3", "m1"]  # m1 had been forgotten; m3 had not


def test_handler_exception_acks_false(fl: Floor) -> None:
    def boom(obj: dict[str, Any]) -> bool:
        raise RuntimeError("handler bug")

    with Listener.for_session(fl, SID, boom):
        via, _ = fl.write_line(SID, msg(1))
    assert via == "file"
    assert [m["id"] for m in fl.peek(SID)] == ["m1"]


def test_unterminated_line_before_close_is_handled(fl: Floor) -> None:
    seen: list[Any] = []
    lis = Listener.for_session(fl, SID, collect(seen))
    with lis, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(os.fspath(lis.path))
        s.sendall(json.dumps(msg(1)).encode())
        s.shutdown(socket.SHUT_WR)
        assert s.recv(100) == b'{"ok": true}\n'
    assert seen == [msg(1)]


def test_stale_socket_is_replaced(fl: Floor) -> None:
    d = fl.session_dir(SID, create=True)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(os.fspath(d / "inbox.sock"))
    stale.close()
    got: list[dict[str, Any]] = []
    with Listener.for_session(fl, SID, collect(got)):
        assert fl.write_line(SID, msg(1))[0] == "socket"
    assert got == [msg(1)]


def test_a_live_listener_is_not_stolen(fl: Floor) -> None:
    with Listener.for_session(fl, SID, lambda o: True) as first:
        with pytest.raises(Refused, match="already live"):
            Listener.for_session(fl, SID, lambda o: True).start()
        assert fl.write_line(SID, msg(1))[0] == "socket"
        assert first.path.exists()


def test_many_concurrent_senders(fl: Floor) -> None:
    got: list[str] = []
    with Listener.for_session(fl, SID, collect(got, "id")):
        vias: list[str] = []

        def send(k: int) -> None:
            for i in range(25):
                vias.append(fl.write_line(SID, msg(k * 100 + i), ack_timeout=5)[0])

        threads = [threading.Thread(target=send, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    assert vias == ["socket"] * 200 and len(set(got)) == 200 == len(got)


def test_run_listener_prints_lines_until_stopped(fl: Floor) -> None:
    out = io.StringIO()
    ready, stop = threading.Event(), threading.Event()
    rc: list[int] = []
    t = threading.Thread(
        target=lambda: rc.append(run_listener(fl, SID, None, out, stop=stop, ready=ready))
    )
    t.start()
    try:
        assert ready.wait(5)
        assert fl.write_line(SID, msg(1, text="ünï\nline2"))[0] == "socket"
    finally:
        stop.set()
        t.join(5)
    assert rc == [0]
    assert [json.loads(ln) for ln in out.getvalue().splitlines()] == [msg(1, text="ünï\nline2")]
    assert not fl.socket_path(SID).exists()


def test_run_listener_exec_acks_on_exit_status(fl: Floor, tmp_path: Path) -> None:
    sink = tmp_path / "sink.jsonl"
    script = (
        "import json, sys; o = json.loads(sys.stdin.read()); "
        f"open({str(sink)!r}, 'a').write(json.dumps(o) + '\\n'); "
        "sys.exit(0 if o['text'] != 'no' else 3)"
    )
    cmd = f'{sys.executable} -c "{script}"'
    ready, stop = threading.Event(), threading.Event()
    t = threading.Thread(
        target=run_listener, args=(fl, SID, cmd), kwargs={"stop": stop, "ready": ready}
    )
    t.start()
    try:
        assert ready.wait(5)
        assert fl.write_line(SID, msg(1), ack_timeout=10)[0] == "socket"
        assert fl.write_line(SID, msg(2, text="no"), ack_timeout=10)[0] == "file"
    finally:
        stop.set()
        t.join(5)
    assert [json.loads(ln)["id"] for ln in sink.read_text().splitlines()] == ["m1", "m2"]
    assert [m["id"] for m in fl.peek(SID)] == ["m2"]
