"""The config.toml lines that trust the inbox's Codex hooks (bus.surfaces.harness.codex_trust); the
real Codex reading them is tests/integration/harness/test_codex_cli.py."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from bus.surfaces.harness import codex_trust

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


def test_uninstall_drops_exactly_the_inbox_hooks_trust_tables(tmp_path: Path) -> None:
    hooks_file = tmp_path / "p" / ".codex" / "hooks.json"
    hooks_file.parent.mkdir(parents=True)
    own = {"type": "command", "command": "touch /tmp/mine"}
    ours = {"type": "command", "command": OURS.replace("SessionStart", "UserPromptSubmit")}
    stop = {"type": "command", "command": OURS.replace("SessionStart", "Stop")}
    groups = {
        "UserPromptSubmit": [{"hooks": [own]}, {"hooks": [ours]}],
        "Stop": [{"hooks": [stop]}],
    }
    hooks_file.write_text(json.dumps({"hooks": groups}))
    target = hooks_file.resolve()
    keys = codex_trust.own_keys(hooks_file)
    assert keys == [f"{target}:user_prompt_submit:1:0", f"{target}:stop:0:0"]
    config = tmp_path / "config.toml"
    config.write_text(
        'model = "m"\n\n'
        f'[projects."{target.parent.parent}"]\ntrust_level = "trusted"\n\n'
        f'[hooks.state."{target}:user_prompt_submit:0:0"]\ntrusted_hash = "sha256:own"\n\n'
        f'[hooks.state."{target}:user_prompt_submit:1:0"]\ntrusted_hash = "sha256:a"\n\n'
        f"[hooks.state.'{target}:stop:0:0']\ntrusted_hash = \"sha256:b\"\n"
        "[other]\nx = 1\n"
    )
    config.chmod(0o600)
    assert codex_trust.drop_trust(keys, config) == 2
    left = tomllib.loads(config.read_text())
    assert list(left["hooks"]["state"]) == [f"{target}:user_prompt_submit:0:0"]
    assert left["model"] == "m" and left["other"] == {"x": 1} and "projects" in left
    assert config.stat().st_mode & 0o777 == 0o600
    assert codex_trust.drop_trust(keys, config) == 0  # nothing left to take out
