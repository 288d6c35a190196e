"""Another user of the same host: the folders under /tmp where the bus keeps its sockets
and passwords, and the command server's socket, are this user's or nothing is sent.

The victim's home is deep, so its embedded Redis socket, password and the command
server's socket live under /tmp (bus.local.runtime_dir). The other user makes that folder
first, or a link to one of theirs, and listens there: the victim's commands refuse in
words naming the folder, and the other user's sockets get not one byte."""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from bus.core.locate import embedded_socket
from bus.local.runtime_dir import UnsafeFolder, open_private
from bus.surfaces import command_server
from tests.support.local_users import Listener, User, as_user, make_folders, run_inbox, two_users

__all__ = ["two_users"]  # the fixture, used by name

SEND = ["send", "--to-id", "demo", "--from", "vh:me", "--text", "a private body"]


@pytest.fixture
def victim_home(two_users: tuple[User, User]) -> Iterator[Path]:
    """A home of the victim's, too deep for a unix socket under it; others may pass
    through its parents (so a socket inside it could be reached, were it another's)."""
    victim = two_users[0]
    base = Path(tempfile.mkdtemp(prefix="inbox-users-"))
    home = base / ("h" * 100)
    home.mkdir()
    for p in (base, home):
        os.chown(p, victim.uid, victim.gid)
        os.chmod(p, 0o755)
    try:
        yield home
    finally:
        shutil.rmtree(base, ignore_errors=True)


def victim_env(home: Path) -> dict[str, str]:
    return {
        "INBOX_HOME": str(home),
        "INBOX_HOST": "vh",
        "INBOX_TOKEN": "the-victims-token",
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    }


def where_sockets_go(victim: User, home: Path) -> Path:
    return Path(as_user(victim, lambda: str(embedded_socket(home).parent)))


def assert_refused(got: tuple[int, str, str], victim: User) -> dict[str, str]:
    code, out, err = got
    assert code == 1, got
    refusal = json.loads(out)
    assert refusal["ok"] is False and refusal["error"] == "unsafe_folder", refusal
    assert f"/tmp/inbox-{victim.uid}" in refusal["message"]
    assert "remove" in err and err.startswith("inbox: ") and err.count("\n") == 1, err
    return refusal


def test_a_socket_folder_another_user_made_first_is_refused_and_gets_nothing(
    two_users: tuple[User, User], victim_home: Path
) -> None:
    victim, other = two_users
    folder = where_sockets_go(victim, victim_home)
    make_folders(other, folder)  # 0777, theirs, before the victim's first command
    listener = Listener(other, [folder / "redis.sock", folder / "commands.sock"])
    env = victim_env(victim_home)
    try:
        for argv in (["session", "open", "demo"], SEND, ["status"], ["doctor"]):
            refusal = assert_refused(as_user(victim, lambda a=argv: run_inbox(a, env)), victim)
            assert "belongs to another user" in refusal["message"]
        # `inbox up` refuses before it starts anything there.
        assert_refused(as_user(victim, lambda: run_inbox(["up"], env)), victim)
    finally:
        connections, received = listener.close()
    assert (connections, received) == (0, 0)


def test_a_link_to_another_users_folder_is_refused(
    two_users: tuple[User, User], victim_home: Path
) -> None:
    victim, other = two_users
    folder = where_sockets_go(victim, victim_home)
    top = Path("/tmp") / folder.relative_to("/tmp").parts[0]
    theirs = Path(tempfile.mkdtemp(prefix="inbox-theirs-"))
    try:
        os.chown(theirs, other.uid, other.gid)
        os.chmod(theirs, 0o777)
        as_user(other, lambda: os.symlink(theirs, top))
        inside = theirs / folder.relative_to(top)
        make_folders(other, inside)
        listener = Listener(other, [inside / "redis.sock"])
        try:
            got = as_user(
                victim, lambda: run_inbox(["session", "open", "demo"], victim_env(victim_home))
            )
            refusal = assert_refused(got, victim)
            assert "is a link" in refusal["message"]
        finally:
            connections, received = listener.close()
        assert (connections, received) == (0, 0)
    finally:
        shutil.rmtree(theirs, ignore_errors=True)


def test_the_command_server_will_not_listen_in_another_users_folder(
    two_users: tuple[User, User], victim_home: Path
) -> None:
    victim, other = two_users
    path = Path(as_user(victim, lambda: str(command_server.socket_path(victim_home))))
    make_folders(other, path.parent)
    listener = Listener(other, [path])
    try:
        with pytest.raises(RuntimeError, match="UnsafeFolder"):
            as_user(victim, lambda: command_server.serve(path), timeout=20)
        assert stat.S_ISSOCK(os.lstat(path).st_mode)  # theirs, neither removed nor replaced
    finally:
        listener.close()


def test_the_command_client_sends_nothing_to_a_server_of_another_user(
    two_users: tuple[User, User], tmp_path: Path
) -> None:
    victim, other = two_users
    # A short home (its sockets inside it) whose redis folder its owner left writable.
    base = Path(tempfile.mkdtemp(prefix="inbox-users-"))
    try:
        home = base / "h"
        (home / "redis").mkdir(parents=True)
        for p in (base, home, home / "redis"):
            os.chown(p, victim.uid, victim.gid)
            os.chmod(p, 0o777 if p.name == "redis" else 0o755)
        listener = Listener(other, [Path(command_server.socket_path(home))])
        try:
            code, out, err = as_user(victim, lambda: run_inbox(SEND, victim_env(home)))
        finally:
            connections, received = listener.close()
        assert code == 1 and json.loads(out)["error"] == "unsafe_socket", (code, out, err)
        assert f"uid {other.uid}" in err and err.count("\n") == 1
        assert (connections, received) == (1, 0)  # connected, then not one byte
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize(
    ("mode", "refused"), [(0o700, False), (0o755, False), (0o770, True), (0o777, True)]
)
def test_a_folder_of_this_users_that_others_can_write_is_refused(
    tmp_path: Path, mode: int, refused: bool
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    os.chmod(root, mode)
    if refused:
        with pytest.raises(UnsafeFolder, match="can be written by other users") as err:
            open_private(root / "redis-x", root)
        assert err.value.folder == str(root) and f"remove {root}" in err.value.fix
        assert not (root / "redis-x").exists()
    else:
        os.close(open_private(root / "redis-x", root))
        for p in (root, root / "redis-x"):
            assert stat.S_IMODE(os.stat(p).st_mode) == 0o700
