"""INBOX_DURABILITY and INBOX_DURABILITY_TIMEOUT_S: read, checked, handed to children."""

from __future__ import annotations

import pytest

from bus.core.settings import Settings


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        (None, "memory"),
        ("", "memory"),
        ("memory", "memory"),
        ("disk", "disk"),
        (" Replica ", "replica"),
    ],
)
def test_durability_levels_read(raw: str | None, want: str) -> None:
    env = {} if raw is None else {"INBOX_DURABILITY": raw}
    s = Settings.from_env(env)
    assert s.durability == want
    assert Settings.from_env(s.to_env()).durability == want


@pytest.mark.parametrize("raw", ["fsync", "always", "2"])
def test_unknown_durability_is_refused_by_name(raw: str) -> None:
    with pytest.raises(ValueError, match="INBOX_DURABILITY must be one of memory, disk, replica"):
        Settings.from_env({"INBOX_DURABILITY": raw})


def test_durability_timeout_read_and_positive() -> None:
    s = Settings.from_env({"INBOX_DURABILITY_TIMEOUT_S": "0.5"})
    assert s.durability_timeout_s == 0.5
    assert Settings.from_env(s.to_env()).durability_timeout_s == 0.5
    with pytest.raises(ValueError, match="INBOX_DURABILITY_TIMEOUT_S"):
        Settings.from_env({"INBOX_DURABILITY_TIMEOUT_S": "0"})
