"""A session's socket whatever the length of its path (bus.local.unix_socket), and where it
cannot be had: `inbox status`, `inbox doctor` and the SessionStart hook say why and the fix.
Real folders, links and sockets; the CLI as subprocesses."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import tempfile
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest

from bus.api import Bus
from bus.core.models import now_ms
from bus.core.settings import Settings
from bus.local import unix_socket
from bus.local.unix_socket import SOCKET_PATH_MAX, Unreachable, address, fits, link_name
from bus.surfaces.harness.hooks import run_hook
from tests.support.cli import inbox_as as cli

NOBODY = 65534


@pytest.fixture
def root() -> Iterator[Path]:
    # A runtime root of this test's own: the real /tmp/inbox-<uid> is shared by every run.
    r = Path(tempfile.mkdtemp(prefix="us-")) / "rt"
    yield r
    shutil.rmtree(r.parent, ignore_errors=True)


def deep(base: Path) -> Path:
    """A session folder whose socket path is over 200 bytes."""
    d = base / ("d" * 100) / ("e" * 60) / "inbox" / str(uuid.uuid4())
    d.mkdir(parents=True)
    return d


@pytest.mark.parametrize(
    ("length", "fit"),
    [(1, True), (SOCKET_PATH_MAX - 1, True), (SOCKET_PATH_MAX, True), (SOCKET_PATH_MAX + 1, False)],
)
def test_fits_is_the_os_cap_in_bytes(length: int, fit: bool) -> None:
    assert fits("/" + "a" * (length - 1)) is fit


def test_fits_counts_bytes_not_characters() -> None:
    two_byte = "/" + "é" * (SOCKET_PATH_MAX // 2)  # fewer characters than the cap, more bytes
    assert len(two_byte) <= SOCKET_PATH_MAX and not fits(two_byte)


def test_a_path_that_fits_is_its_own_address_and_makes_nothing(root: Path) -> None:
    short = Path("/tmp/x/inbox.sock")
    assert address(short, root) == "/tmp/x/inbox.sock"
    assert not root.exists()


def test_a_long_path_is_reached_through_a_short_link_to_its_folder(
    tmp_path: Path, root: Path
) -> None:
    folder = deep(tmp_path)
    sock = folder / "inbox.sock"
    got = address(sock, root)
    assert got == f"{root}/{link_name(folder)}/inbox.sock" and fits(got)
    assert os.readlink(root / link_name(folder)) == str(folder)
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o700
    assert address(sock, root) == got  # the same link, kept
    # Bound through the link, the socket file is in the session's own folder.
    with unix_socket.listen(sock, 4, root) as server:
        assert stat.S_ISSOCK(os.stat(sock).st_mode) and stat.S_IMODE(os.stat(sock).st_mode) == 0o600
        assert unix_socket.live(sock, root)
        with unix_socket.connect(sock, 1.0, root):
            conn, _ = server.accept()
            conn.close()
    assert unix_socket.live(sock, root) is False  # nobody answers: stale, removed
    assert not sock.exists()


def test_a_wrong_link_is_mended_and_dangling_ones_pruned(tmp_path: Path, root: Path) -> None:
    folder = deep(tmp_path)
    root.mkdir(mode=0o755)
    os.symlink("/elsewhere", root / link_name(folder))
    os.symlink(str(tmp_path / "gone"), root / ("0" * 24))
    address(folder / "inbox.sock", root)
    assert os.readlink(root / link_name(folder)) == str(folder)
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o700  # tightened
    other = deep(tmp_path)
    address(other / "inbox.sock", root)  # a new link: the dangling ones go
    assert sorted(os.listdir(root)) == sorted([link_name(folder), link_name(other)])


def test_threads_making_the_same_link_at_once_all_get_it(tmp_path: Path, root: Path) -> None:
    sock = deep(tmp_path) / "inbox.sock"
    with ThreadPoolExecutor(8) as pool:
        got = set(pool.map(lambda _: address(sock, root), range(32)))
    assert got == {f"{root}/{link_name(sock.parent)}/inbox.sock"}
    assert os.listdir(root) == [link_name(sock.parent)]  # no temporary link left behind


def _link_root(root: Path) -> None:
    target = root.parent / "real"
    target.mkdir(mode=0o700)
    root.symlink_to(target)


def _file_root(root: Path) -> None:
    root.write_text("")


def _others_root(root: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to make a folder of another user's")
    root.mkdir(mode=0o700)
    os.chown(root, NOBODY, NOBODY)


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (_link_root, "is a link or a file"),
        (_file_root, "is a link or a file"),
        (_others_root, "belongs to another user"),
    ],
    ids=["link", "file", "another-user"],
)
def test_a_root_that_is_not_this_users_folder_is_refused_in_words(
    tmp_path: Path, root: Path, make: Callable[[Path], None], reason: str
) -> None:
    make(root)
    sock = deep(tmp_path) / "inbox.sock"
    with pytest.raises(Unreachable) as err:
        address(sock, root)
    assert reason in err.value.reason and str(root) in err.value.fix
    assert "INBOX_HOME" in err.value.fix
    assert unix_socket.problem(sock, root) == {"reason": err.value.reason, "fix": err.value.fix}
    with pytest.raises(Unreachable):
        unix_socket.listen(sock, 4, root)
    assert not sock.exists()


def test_a_folder_in_the_way_of_the_link_is_refused_and_left(tmp_path: Path, root: Path) -> None:
    folder = deep(tmp_path)
    (root / link_name(folder) / "keep").mkdir(parents=True)
    with pytest.raises(Unreachable, match="in the way"):
        address(folder / "inbox.sock", root)
    assert (root / link_name(folder) / "keep").is_dir()


def test_invalid_ids_never_become_paths(tmp_path: Path) -> None:
    assert unix_socket.session_problems(tmp_path, ["..", "a/b", "", "x" * 181]) == {}
    assert list(tmp_path.iterdir()) == []


# --- what a person is told: status, doctor, the SessionStart hook -------------------------


@pytest.fixture
def blocked() -> Iterator[Callable[[Bus, str], None]]:
    """Blocks one session's short link in the real runtime root (/tmp/inbox-<uid>) with a
    folder in the way: that session, and no other, cannot be woken or heard."""
    made: list[Path] = []

    def block(b: Bus, sid: str) -> None:
        name = unix_socket.runtime_root() / link_name(b.floor.session_dir(sid))
        (name / "in-the-way").mkdir(parents=True)
        made.append(name)

    yield block
    for name in made:
        shutil.rmtree(name, ignore_errors=True)


def test_status_doctor_and_session_start_say_which_session_cannot_be_woken_and_the_fix(
    make_bus: Callable[..., Bus], settings: Settings, blocked: Callable[[Bus, str], None]
) -> None:
    s = replace(settings, home=settings.home / ("d" * 100) / ("e" * 60))
    b = make_bus(home=s.home)
    stuck, fine = str(uuid.uuid4()), str(uuid.uuid4())
    assert len(str(b.floor.socket_path(stuck)).encode()) > 200
    b.floor.session_dir(stuck, create=True)
    blocked(b, stuck)

    code, said = run_hook("SessionStart", {"session_id": stuck, "source": "startup"}, b)
    assert code == 0 and said.count("cannot be woken while idle") == 1
    assert "in the way" in said and "INBOX_HOME" in said
    code, said = run_hook("SessionStart", {"session_id": fine, "source": "startup"}, b)
    assert code == 0 and "cannot be woken" not in said

    for answer in (b.status(), json.loads(cli(s, "status").stdout)):
        rows = {r["session"]: r for r in answer["sessions"]}
        assert "in the way" in rows[stuck]["unreachable"]["reason"]
        assert "INBOX_HOME" in rows[stuck]["unreachable"]["fix"]
        assert "unreachable" not in rows[fine]

    b.store.schedule.beat(b.settings.host, {"beat": now_ms()})  # a worker serves the host
    out = cli(s, "doctor")
    assert out.returncode == 1, out.stderr
    report = json.loads(out.stdout)
    assert report["ok"] is False and report["error"] == "unreachable"
    assert report["checked"] == 2 and [p["session"] for p in report["problems"]] == [stuck]
    assert {"reason", "fix", "effect"} <= set(report["problems"][0])
    clean = json.loads(cli(s, "doctor", fine).stdout)
    assert clean.pop("server")["state"] in ("ok", "unfixed")  # the suite's server, judged
    assert clean == {"ok": True, "home": str(s.home), "checked": 1, "problems": []}
    refused = cli(s, "doctor", "../x")
    assert refused.returncode == 2 and json.loads(refused.stdout)["error"] == "bad_input"
    assert not (s.home / "inbox" / "x").exists()


def test_a_session_with_a_long_path_is_not_reported(
    make_bus: Callable[..., Bus], settings: Settings
) -> None:
    s = replace(settings, home=settings.home / ("d" * 100) / ("e" * 60))
    b = make_bus(home=s.home)
    sid = str(uuid.uuid4())
    b.open_session(sid)
    assert "unreachable" not in b.status()["sessions"][0]
    b.store.schedule.beat(b.settings.host, {"beat": now_ms()})  # a worker serves the host
    assert json.loads(cli(s, "doctor").stdout)["problems"] == []
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.bind(address(b.floor.socket_path(sid)))  # the link works for anyone on this host
    probe.close()
