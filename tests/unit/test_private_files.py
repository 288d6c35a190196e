"""Every private file the home keeps is written the one way (bus.local.private_files):
0600, whole, and never through a link someone made where it goes."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from bus.local.private_files import LinkRefused, write_private
from bus.local.up_procs import write_procs
from bus.ops.flower import write_auth_file
from bus.ops.join import remember

WRITERS: list[tuple[str, Callable[[Path], object]]] = [
    ("store.env", lambda home: remember(home, {"INBOX_REDIS_URL": "redis://:pw@h:1/0"})),
    ("flower.auth", lambda home: write_auth_file(home, "admin:pw")),
    ("up.procs.json", lambda home: write_procs(home, [])),
]


@pytest.mark.parametrize(("name", "write"), WRITERS, ids=[w[0] for w in WRITERS])
def test_a_link_where_a_private_file_goes_is_refused(
    tmp_path: Path, name: str, write: Callable[[Path], object]
) -> None:
    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    home.mkdir()
    elsewhere.write_text("theirs\n")
    (home / name).symlink_to(elsewhere)
    with pytest.raises(LinkRefused):
        write(home)
    assert elsewhere.read_text() == "theirs\n"
    assert sorted(p.name for p in home.iterdir()) == [name]  # nothing else left behind


@pytest.mark.parametrize(("name", "write"), WRITERS, ids=[w[0] for w in WRITERS])
def test_a_private_file_is_0600_whatever_the_umask(
    tmp_path: Path, name: str, write: Callable[[Path], object]
) -> None:
    old = os.umask(0)
    try:
        write(tmp_path)
        write(tmp_path)  # again: replaced whole
    finally:
        os.umask(old)
    assert (tmp_path / name).stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_write_private_replaces_a_file_whole(tmp_path: Path) -> None:
    path = tmp_path / "f"
    write_private(path, "one\n")
    write_private(path, "two\n")
    assert path.read_text() == "two\n"
