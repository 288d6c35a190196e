"""The config.toml lines that trust the inbox's Codex hooks (bus.surfaces.codex_trust); the
real Codex reading them is tests/test_codex_cli.py."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from bus.surfaces import codex_trust

OURS = "INBOX_HOME=/h /venv/bin/inbox hook codex SessionStart"


def entry(path: Path, command: str, status: str = "untrusted", n: int = 0) -> dict[str, Any]:
    return {
        "key": f"{path}:session_start:{n}:0",
        "command": command,
        "sourcePath": str(path),
        "currentHash": f"sha256:{n:064x}",
        "trustStatus": status,
    }


def test_only_the_inbox_hooks_of_the_installed_file_not_yet_trusted(tmp_path: Path) -> None:
    mine = tmp_path / "p" / ".codex" / "hooks.json"
    other = tmp_path / "elsewhere" / "hooks.json"
    entries = [
        entry(mine, OURS, n=0),
        entry(mine, "touch /tmp/mine", n=1),  # the person's own hook
        entry(mine, OURS, "trusted", n=2),
        entry(mine, OURS, "modified", n=3),  # changed since trusted: trust again
        entry(other, OURS, n=4),  # another file's
        entry(mine, OURS, "managed", n=5),
    ]
    picked = codex_trust.untrusted_own(entries, mine)
    assert [e["key"] for e in picked] == [entries[0]["key"], entries[3]["key"]]


def test_the_lines_are_toml_tables_keyed_as_codex_keys_them(tmp_path: Path) -> None:
    mine = tmp_path / 'we"ird p' / ".codex" / "hooks.json"
    entries = [entry(mine, OURS, n=7), entry(mine, OURS, n=8)]
    parsed = tomllib.loads(codex_trust.trust_toml(entries))
    assert parsed["hooks"]["state"] == {
        e["key"]: {"trusted_hash": e["currentHash"]} for e in entries
    }


def test_a_projects_hooks_file_is_listed_for_the_project(tmp_path: Path) -> None:
    assert codex_trust.project_of(tmp_path / "p" / ".codex" / "hooks.json") == tmp_path / "p"
    assert codex_trust.project_of(tmp_path / "hooks.json") == tmp_path
