"""The file floor: local precedence, drain claims, caps, permissions (real files, real sockets)."""

from __future__ import annotations

import json
import os
import socket
import stat
import threading
from pathlib import Path
from typing import Any

import pytest

from bus.core.errors import BadInput, Refused
from bus.delivery import floor as floor_mod
from bus.delivery.floor import LOG_KEEP, Floor, socket_path_fits
from bus.local import unix_socket
from bus.surfaces.harness.listener import Listener
from tests.support.listeners import collect

SID = "sess-1"


def msg(i: int | str, **kw: Any) -> dict[str, Any]:
    return {
        "v": 1,
        "id": i if isinstance(i, str) else f"m{i}",
        "ts": 1790283480000,
        "from": "neo:sip",
        "to_id": SID,
        "text": f"hello {i}",
        **kw,
    }


def mode(p: Path) -> int:
    return stat.S_IMODE(os.stat(p).st_mode)


def file_lines(p: Path) -> list[dict[str, Any]]:
    if not p.exists():
        return []
    return [json.loads(ln) for ln in p.read_text().splitlines() if ln.strip()]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    # Short: unix socket paths are capped at 104/108 bytes.
    return tmp_path


@pytest.fixture
def fl(home: Path) -> Floor:
    return Floor(home)


class SilentServer:
    """A raw socket server that reads and either stays silent or answers a fixed line."""

    def __init__(self, path: Path, answer: bytes | None) -> None:
        self.path, self.answer = path, answer
        self.got = threading.Event()
        self.release = threading.Event()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(os.fspath(path))
        self.sock.listen(4)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            conn.recv(65536)
            self.got.set()
            if self.answer is not None:
                conn.sendall(self.answer)
            self.release.wait(5)

    def close(self) -> None:
        self.release.set()
        self.thread.join(5)
        self.sock.close()


# --- local precedence ------------------------------------------------------------------


def test_socket_delivery_acked_leaves_file_empty(fl: Floor) -> None:
    got: list[dict[str, Any]] = []
    with Listener.for_session(fl, SID, collect(got)):
        via, path = fl.write_line(SID, msg(1))
    assert via == "socket" and path == fl.socket_path(SID)
    assert got == [msg(1)]
    assert not (fl.session_dir(SID) / "messages.jsonl").exists()
    assert not fl.socket_path(SID).exists()  # stop() removed it


def test_stale_socket_file_falls_back_to_file(fl: Floor) -> None:
    d = fl.session_dir(SID, create=True)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(os.fspath(d / "inbox.sock"))
    s.close()  # bound, never listened, closed: the file stays behind, nobody answers
    assert (d / "inbox.sock").exists()
    via, path = fl.write_line(SID, msg(1))
    assert (via, path.name) == ("file", "messages.jsonl")
    assert file_lines(path) == [msg(1)]


@pytest.mark.parametrize(
    "answer",
    [None, b'{"ok": false}\n', b"garbage\n", b'{"ok": "yes"}\n', b"[true]\n"],
    ids=["silent", "ok-false", "garbage", "ok-not-true", "not-object"],
)
def test_unacked_socket_lands_on_file(fl: Floor, answer: bytes | None) -> None:
    d = fl.session_dir(SID, create=True)
    server = SilentServer(d / "inbox.sock", answer)
    try:
        via, path = fl.write_line(SID, msg(1), ack_timeout=0.3)
        assert server.got.is_set()  # the listener did get the line
    finally:
        server.close()
    assert via == "file"
    assert file_lines(path) == [msg(1)]


def test_a_socket_path_over_200_bytes_is_bound_and_heard_through_its_short_link(
    tmp_path: Path,
) -> None:
    home = tmp_path / ("x" * 80) / ("y" * 80)
    fl = Floor(home)
    sock = fl.socket_path(SID)
    assert len(os.fsencode(sock)) > 200 and not socket_path_fits(sock)
    fl.session_dir(SID, create=True)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(unix_socket.address(sock))
    s.close()  # a stale socket left at the long path: nobody answers, the listener clears it
    got: list[dict[str, Any]] = []
    with Listener.for_session(fl, SID, collect(got)):
        assert stat.S_ISSOCK(os.stat(sock).st_mode) and mode(sock) == 0o600
        assert mode(fl.session_dir(SID)) == 0o700
        with pytest.raises(Refused) as live:
            Listener.for_session(fl, SID, lambda o: True).start()
        assert live.value.code == "listening"
        via, path = fl.write_line(SID, msg(1))
    assert (via, path) == ("socket", sock) and got == [msg(1)]
    assert not (fl.session_dir(SID) / "messages.jsonl").exists()
    assert not sock.exists()  # stop() removed it


def test_append_skips_a_live_socket(fl: Floor) -> None:
    got: list[dict[str, Any]] = []
    with Listener.for_session(fl, SID, collect(got)):
        path = fl.append(SID, msg(1))
    assert got == [] and file_lines(path) == [msg(1)]


def test_concurrent_appenders_never_interleave(fl: Floor) -> None:
    big = "z" * 6000

    def work(t: int) -> None:
        for i in range(100):
            fl.append(SID, msg(f"{t}-{i}", text=big))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = file_lines(fl.session_dir(SID) / "messages.jsonl")
    assert len(lines) == 600 and {ln["text"] for ln in lines} == {big}


# --- drain -----------------------------------------------------------------------------


def test_drain_missing_dir_or_file_is_empty(fl: Floor) -> None:
    assert fl.drain(SID).lines == [] and fl.peek(SID) == []
    fl.session_dir(SID, create=True)
    r = fl.drain(SID)
    assert (r.lines, r.malformed) == ([], [])


def test_drain_moves_lines_to_log(fl: Floor) -> None:
    for i in range(3):
        fl.append(SID, msg(i))
    assert [m["id"] for m in fl.peek(SID)] == ["m0", "m1", "m2"]
    assert [m["id"] for m in fl.peek(SID)] == ["m0", "m1", "m2"]  # peek does not consume
    r = fl.drain(SID)
    d = fl.session_dir(SID)
    assert [m["id"] for m in r.lines] == ["m0", "m1", "m2"]
    assert [m["id"] for m in file_lines(d / "log.jsonl")] == ["m0", "m1", "m2"]
    # Left: the log, and an empty queue file for the next notice (Floor.prepare).
    assert sorted(os.listdir(d)) == ["log.jsonl", "log.lock", "messages.jsonl"]
    assert (d / "messages.jsonl").stat().st_size == 0
    assert fl.drain(SID).lines == []


def test_append_after_claim_lands_in_fresh_file(fl: Floor, monkeypatch: pytest.MonkeyPatch) -> None:
    fl.append(SID, msg("old"))
    real_claim = Floor._claim_queue

    def claim_then_append(d: Path) -> tuple[Path, int] | None:
        got = real_claim(d)  # the rename is done and the claim locked ...
        fl.append(SID, msg("late"))  # ... so a sender now must land in a fresh file
        return got

    monkeypatch.setattr(Floor, "_claim_queue", staticmethod(claim_then_append))
    r = fl.drain(SID)
    monkeypatch.undo()
    assert [m["id"] for m in r.lines] == ["old"]
    assert [m["id"] for m in file_lines(fl.session_dir(SID) / "messages.jsonl")] == ["late"]
    assert [m["id"] for m in fl.drain(SID).lines] == ["late"]


def test_appender_that_opened_before_the_claim_is_not_lost(
    fl: Floor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An appender opened messages.jsonl, then a drainer renamed it before the write."""
    fl.append(SID, msg("old"))
    d = fl.session_dir(SID)
    real_open = floor_mod._open_private
    fired: list[Path] = []

    def open_then_claim(path: Path, flags: int) -> int:
        fd = real_open(path, flags)
        if path.name == "messages.jsonl" and not fired:
            fired.append(path)
            os.rename(path, d / "messages.draining.1.1")  # a drainer's claim, in between
        return fd

    monkeypatch.setattr(floor_mod, "_open_private", open_then_claim)
    fl.append(SID, msg("racer"))
    monkeypatch.undo()
    # The racer retried on a fresh file instead of writing into the claimed one.
    assert [m["id"] for m in file_lines(d / "messages.draining.1.1")] == ["old"]
    assert [m["id"] for m in file_lines(d / "messages.jsonl")] == ["racer"]
    assert [m["id"] for m in fl.drain(SID).lines] == ["old", "racer"]


def test_orphaned_draining_files_are_picked_up_first(fl: Floor) -> None:
    d = fl.session_dir(SID, create=True)
    fl.append(SID, msg("new"))
    # A prox drainer (ms stamp) and one of ours (ns stamp) died holding their claims.
    (d / "messages.draining.1790283480000").write_text(json.dumps(msg("prox-old")) + "\n")
    (d / "messages.draining.1790283490000000000.42").write_text(json.dumps(msg("ours")) + "\n")
    assert [m["id"] for m in fl.peek(SID)] == ["prox-old", "ours", "new"]
    assert fl.contains_id(SID, "prox-old")
    r = fl.drain(SID)
    assert [m["id"] for m in r.lines] == ["prox-old", "ours", "new"]
    assert [n for n in os.listdir(d) if n.startswith("messages.")] == ["messages.jsonl"]
    assert (d / "messages.jsonl").stat().st_size == 0  # the next notice's, empty


def test_a_live_drainers_claim_is_not_taken(fl: Floor) -> None:
    import fcntl

    d = fl.session_dir(SID, create=True)
    claim = d / "messages.draining.1790283490000000000.7"
    claim.write_text(json.dumps(msg("busy")) + "\n")
    fd = os.open(claim, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # the other drainer is alive and holds it
        assert fl.drain(SID).lines == []
        assert claim.exists()
    finally:
        os.close(fd)
    assert [m["id"] for m in fl.drain(SID).lines] == ["busy"]


def test_log_keeps_exactly_the_last_500_lines(fl: Floor) -> None:
    total = 0
    for batch in (200, 300, 120):  # 620 lines over three drains crosses the cap
        for _ in range(batch):
            fl.append(SID, msg(total))
            total += 1
        assert len(fl.drain(SID).lines) == batch
    log = file_lines(fl.session_dir(SID) / "log.jsonl")
    assert len(log) == LOG_KEEP
    assert [m["id"] for m in log] == [f"m{i}" for i in range(120, 620)]
    assert mode(fl.session_dir(SID) / "log.jsonl") == 0o600


def test_malformed_and_torn_lines_are_kept_aside(fl: Floor) -> None:
    d = fl.session_dir(SID, create=True)
    good = [json.dumps(msg(i)) for i in range(3)]
    raw = "\n".join([good[0], "not json", good[1], "[1, 2]", '"str"', good[2], '{"id": "m9", "te'])
    (d / "messages.jsonl").write_bytes(raw.encode() + b"\n\xff\xfe{\n")
    r = fl.drain(SID)
    assert [m["id"] for m in r.lines] == ["m0", "m1", "m2"]
    assert r.malformed[:4] == ["not json", "[1, 2]", '"str"', '{"id": "m9", "te']
    assert len(r.malformed) == 5
    kept = file_lines(d / "malformed.jsonl")
    assert [k["raw"] for k in kept] == r.malformed
    assert all(k["source"].startswith("messages.draining.") and k["at"] > 0 for k in kept)
    assert mode(d / "malformed.jsonl") == 0o600
    assert [m["id"] for m in file_lines(d / "log.jsonl")] == ["m0", "m1", "m2"]


def test_two_concurrent_drainers_take_every_line_once(fl: Floor) -> None:
    n = 2000
    fl.session_dir(SID, create=True)
    sent = threading.Event()
    results: list[list[str]] = [[], []]

    def sender() -> None:
        for i in range(n):
            fl.append(SID, msg(i))
        sent.set()

    def drainer(k: int) -> None:
        while not sent.is_set():
            results[k].extend(m["id"] for m in fl.drain(SID).lines)
        results[k].extend(m["id"] for m in fl.drain(SID).lines)

    threads = [threading.Thread(target=sender)] + [
        threading.Thread(target=drainer, args=(k,)) for k in (0, 1)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    every = results[0] + results[1] + [m["id"] for m in fl.drain(SID).lines]
    assert len(every) == n and set(every) == {f"m{i}" for i in range(n)}


# --- paths, permissions, ids -------------------------------------------------------------


@pytest.mark.parametrize("umask", [0o022, 0o000, 0o277])
def test_permissions_are_exact_whatever_the_umask(fl: Floor, home: Path, umask: int) -> None:
    old = os.umask(umask)
    try:
        fl.append(SID, msg(1))
        fl.drain(SID)
        fl.append(SID, {"broken": True})
        with (fl.session_dir(SID) / "messages.jsonl").open("a") as f:
            f.write("torn\n")
        fl.drain(SID)
        fl.append(SID, msg(2))
    finally:
        os.umask(old)
    d = fl.session_dir(SID)
    assert mode(home / "inbox") == 0o700 and mode(d) == 0o700
    for name in ("messages.jsonl", "log.jsonl", "log.lock", "malformed.jsonl"):
        assert mode(d / name) == 0o600, name


@pytest.mark.parametrize("sid", ["a/b", "..", ".", "a\x00b", "x" * 181, "", "a b", "../x"])
def test_bad_session_ids_create_nothing(fl: Floor, home: Path, sid: str) -> None:
    for call in (
        lambda: fl.session_dir(sid, create=True),
        lambda: fl.append(sid, msg(1)),
        lambda: fl.write_line(sid, msg(1)),
        lambda: fl.drain(sid),
        lambda: fl.peek(sid),
        lambda: fl.contains_id(sid, "m1"),
    ):
        with pytest.raises(BadInput):
            call()
    assert os.listdir(home) == []


def test_line_must_be_a_json_object(fl: Floor) -> None:
    with pytest.raises(BadInput):
        fl.append(SID, ["not", "an", "object"])  # type: ignore[arg-type]
    with pytest.raises(BadInput):
        fl.append(SID, {"x": object()})


def test_lines_are_ascii_and_newline_free(fl: Floor) -> None:
    path = fl.append(SID, msg(1, text="a\nb\u2028c ünï"))
    data = path.read_bytes()
    assert data.count(b"\n") == 1 and data.isascii()
    assert fl.peek(SID)[0]["text"] == "a\nb\u2028c ünï"


def test_contains_id_everywhere(fl: Floor) -> None:
    d = fl.session_dir(SID, create=True)
    fl.append(SID, msg("logged"))
    fl.drain(SID)
    fl.append(SID, msg("queued"))
    (d / "messages.draining.5.5").write_text(json.dumps(msg("claimed")) + "\n")
    for found in ("logged", "queued", "claimed"):
        assert fl.contains_id(SID, found)
    assert not fl.contains_id(SID, "nope")
    assert not fl.contains_id(SID, "log")  # a prefix of an id is not the id
    assert not fl.contains_id("other", "logged")


# --- the queue file made at the turn boundaries, not by a notice -------------------------


def test_prepare_makes_an_empty_private_queue_file_that_a_notice_appends_to(fl: Floor) -> None:
    d = fl.prepare(SID)
    queue = d / "messages.jsonl"
    assert queue.stat().st_size == 0 and mode(queue) == 0o600 and mode(d) == 0o700
    made = queue.stat().st_ino
    fl.append(SID, msg(1))
    assert queue.stat().st_ino == made  # appended to, not made again
    assert [m["id"] for m in file_lines(queue)] == ["m1"]
    fl.prepare(SID)  # again: the file and its line stay
    assert [m["id"] for m in file_lines(queue)] == ["m1"]


def test_a_drain_leaves_the_next_notices_file_and_an_empty_one_is_not_claimed(
    fl: Floor,
) -> None:
    d = fl.prepare(SID)
    queue = d / "messages.jsonl"
    made = queue.stat().st_ino
    assert fl.drain(SID).lines == []
    assert queue.stat().st_ino == made  # empty: not renamed, read and unlinked for nothing
    assert sorted(os.listdir(d)) == ["messages.jsonl"]
    fl.append(SID, msg(1))
    assert [m["id"] for m in fl.drain(SID).lines] == ["m1"]
    assert queue.stat().st_size == 0  # made again after the claim, for the next notice
    fl.append(SID, msg(2))
    assert [m["id"] for m in fl.drain(SID).lines] == ["m2"]
