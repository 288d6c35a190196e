"""The floor's folders and files are this user's: a pre-created shared home is refused.

Another local user who makes ``$INBOX_HOME/inbox/<sid>/`` first must not redirect a
delivery through a link nor receive it on a socket of their own. The suite runs as root,
which passes every permission check, so these tests assert the ownership checks (a
folder or file chowned to ``nobody``), never an ``EACCES``.
"""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path
from typing import Any

import pytest

from bus.api import Bus
from bus.delivery.floor import Floor
from bus.local.owned import UnsafeFloor
from bus.surfaces.harness.listener import Listener

SID = "victim"
NOBODY = 65534


def line(i: str) -> dict[str, Any]:
    return {"v": 1, "id": i, "from": "neo:sip", "to_id": SID, "text": f"hello {i}"}


def mode(p: Path) -> int:
    return stat.S_IMODE(os.stat(p, follow_symlinks=False).st_mode)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def pre_created(home: Path, owner: int | None = None, perm: int = 0o755) -> Path:
    """The victim's folder, made before the victim's first session (by someone else)."""
    d = home / "inbox" / SID
    d.mkdir(parents=True)
    for p in (home, home / "inbox", d):
        os.chmod(p, perm)
    if owner is not None:
        os.chown(d, owner, owner)
    return d


def test_a_symlinked_queue_file_is_refused_and_its_target_untouched(
    home: Path, tmp_path: Path
) -> None:
    d = pre_created(home)
    target = tmp_path / "victims-notes.txt"
    target.write_text("mine\n")
    os.chmod(target, 0o644)
    os.symlink(target, d / "messages.jsonl")
    fl = Floor(home)
    for write in (
        lambda: fl.write_line(SID, line("a")),
        lambda: fl.append(SID, line("b")),
        lambda: fl.prepare(SID),
        lambda: fl.drain(SID),
    ):
        with pytest.raises(UnsafeFloor, match="is a link"):
            write()
    assert target.read_text() == "mine\n"
    assert mode(target) == 0o644  # never chmod-ed through the link
    assert os.path.islink(d / "messages.jsonl")  # not claimed (renamed) by the drain either


def test_a_symlinked_log_is_refused(home: Path, tmp_path: Path) -> None:
    fl = Floor(home)
    d = fl.prepare(SID)
    target = tmp_path / "elsewhere.log"
    target.write_text("")
    os.symlink(target, d / "log.jsonl")
    fl.append(SID, line("a"))
    with pytest.raises(UnsafeFloor, match="is a link"):
        fl.drain(SID)
    assert target.read_text() == ""


def test_a_folder_owned_by_someone_else_is_refused(home: Path) -> None:
    d = pre_created(home, owner=NOBODY)
    fl = Floor(home)
    with pytest.raises(UnsafeFloor, match="belongs to another user") as got:
        fl.prepare(SID)
    assert str(d) in str(got.value) and "INBOX_HOME" in str(got.value)
    with pytest.raises(UnsafeFloor, match="belongs to another user"):
        fl.write_line(SID, line("a"))
    assert os.listdir(d) == []  # nothing written into it
    assert os.stat(d).st_uid == NOBODY and mode(d) == 0o755  # and it was not changed


def test_an_inbox_folder_owned_by_someone_else_is_refused(home: Path) -> None:
    pre_created(home)
    os.chown(home / "inbox", NOBODY, NOBODY)
    with pytest.raises(UnsafeFloor, match="belongs to another user"):
        Floor(home).prepare("someone-new")
    assert not (home / "inbox" / "someone-new").exists()


def test_a_queue_file_owned_by_someone_else_is_refused(home: Path) -> None:
    fl = Floor(home)
    d = fl.prepare(SID)
    os.chown(d / "messages.jsonl", NOBODY, NOBODY)
    with pytest.raises(UnsafeFloor, match="belongs to another user"):
        fl.append(SID, line("a"))
    assert (d / "messages.jsonl").stat().st_size == 0


def test_a_pre_existing_home_of_ours_is_tightened_to_0700(home: Path) -> None:
    d = pre_created(home, perm=0o755)
    Floor(home).prepare(SID)
    assert [mode(p) for p in (home, home / "inbox", d)] == [0o700, 0o700, 0o700]
    assert mode(d / "messages.jsonl") == 0o600


def test_a_foreign_socket_is_never_connected_to(home: Path) -> None:
    """A socket someone else bound gets no line; the file floor takes it."""
    fl = Floor(home)
    got: list[dict[str, Any]] = []

    def take(obj: dict[str, Any]) -> bool:
        got.append(obj)
        return True

    with Listener.for_session(fl, SID, take) as lis:
        assert fl.write_line(SID, line("ours"))[0] == "socket"  # our own socket is used
        os.chown(lis.path, NOBODY, NOBODY)
        via, path = fl.write_line(SID, line("theirs"))
    assert via == "file" and path.name == "messages.jsonl"
    assert [o["id"] for o in got] == ["ours"]
    assert [o["id"] for o in fl.drain(SID).lines] == ["theirs"]


def test_a_socket_in_a_foreign_folder_gets_nothing(home: Path) -> None:
    d = pre_created(home)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(os.fspath(d / "inbox.sock"))
    server.listen(1)
    server.settimeout(0)
    os.chown(d / "inbox.sock", NOBODY, NOBODY)
    os.chown(d, NOBODY, NOBODY)
    try:
        with pytest.raises(UnsafeFloor, match="belongs to another user"):
            Floor(home).write_line(SID, line("a"))
        with pytest.raises(BlockingIOError):
            server.accept()  # nobody connected
    finally:
        server.close()


def test_opening_a_session_on_a_foreign_folder_registers_nothing(bus: Bus) -> None:
    pre_created(bus.settings.home, owner=NOBODY)
    with pytest.raises(UnsafeFloor, match="belongs to another user"):
        bus.open_session(SID)
    assert bus.store.sessions.get_session(SID) is None
