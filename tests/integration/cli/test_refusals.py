"""One refusal shape on every command: ``{"ok": false, "error": code, "message"}`` as the
one JSON line on stdout, one ``inbox: ...`` line on stderr, a non-zero exit.

``inbox hook claude EVENT`` is the one exception by design: a hook never fails the
person's session, so it exits 0 and says what broke on stderr (tests/integration/harness/test_hooks.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bus.core.settings import Settings
from bus.surfaces.cli.app import main

NO_REDIS = {"INBOX_REDIS_URL": "redis://127.0.0.1:1/0"}
BAD_SETTING = {"INBOX_WAKE_DEBOUNCE_S": "soon"}

# (argv, extra environment, error code, exit code, words the stderr line must hold)
CASES: list[tuple[str, dict[str, str], str, int, str]] = [
    ("session open a/b", {}, "bad_input", 2, "invalid session id"),
    ("session close nosuch", {}, "not_found", 1, "open it with: inbox session open nosuch"),
    ("turn nosuch start", {}, "not_found", 1, "open it with"),
    ("turn x middle", {}, "bad_input", 2, "start or end"),
    ("send --to-id nosuch --from h:me --text hi", {}, "not_found", 1, "inbox session open nosuch"),
    ("send --to-id x --from me --text hi", {}, "bad_input", 2, "from must be host:name"),
    ("send --to nobody:x --from h:me --text hi", {}, "not_found", 1, "handle"),
    ("send --text hi", {}, "bad_input", 2, "--to"),
    ("send --to-id x", {}, "bad_input", 2, "--text"),
    ("send --to-id x --from h:me --text hi", NO_REDIS, "unavailable", 3, "inbox up"),
    ("deliver a/b --from h:me --text t", {}, "bad_input", 2, "invalid session id"),
    ("peek nosuch", {}, "not_found", 1, "open it with"),
    ("doctor a/b", {}, "bad_input", 2, "invalid session id"),
    ("drain nosuch", {}, "not_found", 1, "open it with"),
    ("drain a/b", {}, "bad_input", 2, "invalid session id"),
    ("listen a/b", {}, "bad_input", 2, "invalid session id"),
    ("threads nosuch", {}, "not_found", 1, "open it with"),
    ("read nosuch thr_aaaa", {}, "not_found", 1, "thr_aaaa"),
    ("reply nosuch thr_aaaa --text x", {}, "not_found", 1, "open it with"),
    ("withdraw nosuch-msg --by me", {}, "not_found", 1, "nosuch-msg"),
    ("status", NO_REDIS, "unavailable", 3, "INBOX_REDIS_URL"),
    ("top --once", NO_REDIS, "unavailable", 3, "INBOX_REDIS_URL"),
    ("watch", {}, "bad_input", 2, "SID or --all"),
    ("request --to-id bob --type task --text x", {}, "bad_input", 2, "INBOX_SESSION"),
    ("decide thr_aaaa accept", {}, "bad_input", 2, "INBOX_SESSION"),
    ("member add a/b x", {}, "bad_input", 2, "workspace"),
    ("member remove acme nobody", {}, "unknown_member", 1, "not a member"),
    ("item post nosuch k --title t", {}, "not_found", 1, "open it with"),
    ("item settle nosuch k --member m --answer a", {}, "not_found", 1, "open it with"),
    ("item write nosuch k --member m --text t", {}, "not_found", 1, "open it with"),
    ("read-inbox nosuch", {}, "not_found", 1, "open it with"),
    ("reply-inbox nosuch k --text x", {}, "not_found", 1, "open it with"),
    ("token issue --scopes agent:inbox:read", {}, "bad_input", 2, "INBOX_SECRET"),
    ("token revoke x", {}, "bad_input", 2, "INBOX_SECRET"),
    ("hooks claude --install a.json --uninstall a.json", {}, "bad_input", 2, "not both"),
    ("hooks codex --install a.json --uninstall a.json", {}, "bad_input", 2, "not both"),
    ("worker", {"INBOX_HOST": "a b"}, "bad_input", 2, "host name"),
    ("scheduler", BAD_SETTING, "bad_input", 2, "INBOX_WAKE_DEBOUNCE_S"),
    ("up", BAD_SETTING, "bad_input", 2, "INBOX_WAKE_DEBOUNCE_S"),
    ("serve", BAD_SETTING, "bad_input", 2, "INBOX_WAKE_DEBOUNCE_S"),
    ("mcp", BAD_SETTING, "bad_input", 2, "INBOX_WAKE_DEBOUNCE_S"),
    ("flower --basic-auth nocolon", {}, "bad_input", 2, "user:password"),
    ("upgrade", NO_REDIS, "unavailable", 3, "INBOX_REDIS_URL"),
    ("host forget nosuch", {}, "not_found", 1, "no host 'nosuch' is known"),
    ("host forget a/b", {}, "bad_input", 2, "host name"),
    ("repair-aof", {}, "aof_not_repaired", 1, "nothing to repair"),
    ("receipt bad/id --by me", {}, "bad_input", 2, "invalid message id"),
    ("receipt m1", {}, "no_session", 2, "--by SID"),
    ("sent a/b", {}, "bad_input", 2, "invalid session id"),
    ("sent x --state frob", {}, "bad_input", 2, "--state must be one of"),
    ("member link nocolon", {}, "bad_input", 2, "WORKSPACE/NAME"),
    ("frob", {}, "usage", 2, "see: inbox --help"),
    ("send --bogus", {}, "usage", 2, "--help"),
    ("send --to-id s --text hi --durability fsync", {}, "bad_durability", 2, "disk, replica"),
    ("turn", {}, "usage", 2, "Missing argument"),
]


@pytest.fixture
def cli_env(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in settings.to_env().items():
        monkeypatch.setenv(name, value)
    for name in ("INBOX_SESSION", "INBOX_SECRET", "INBOX_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("INBOX_DISPATCHER", "none")


@pytest.mark.parametrize(
    ("argv", "env", "error", "code", "words"), CASES, ids=[c[0] for c in CASES]
)
def test_every_command_refuses_in_one_shape(
    cli_env: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    home: Path,
    argv: str,
    env: dict[str, str],
    error: str,
    code: int,
    words: str,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    before = sorted(home.rglob("*"))
    with pytest.raises(SystemExit) as done:
        main(argv.split())
    out, err = capsys.readouterr()
    assert done.value.code == code, (out, err)
    [line] = out.splitlines()
    answer = json.loads(line)
    assert answer["ok"] is False and answer["error"] == error
    assert isinstance(answer["message"], str) and answer["message"]
    [stderr_line] = err.splitlines()
    assert stderr_line.startswith("inbox: ") and words in stderr_line
    assert sorted(home.rglob("*")) == before  # a refusal writes nothing


def test_every_command_has_a_case() -> None:
    import typer.main

    from bus.surfaces.cli.app import app

    def leaves(group: object, prefix: str = "") -> set[str]:
        names = set()
        for name, cmd in getattr(group, "commands", {}).items():
            if hasattr(cmd, "commands"):
                names |= leaves(cmd, f"{prefix}{name} ")
            else:
                names.add(f"{prefix}{name}")
        return names

    every = leaves(typer.main.get_command(app))
    covered = {c for c in every for argv, *_ in CASES if (argv + " ").startswith(c + " ")}
    # A hook exits 0 whatever breaks, by design.
    assert every - covered == {"hook claude", "hook codex"}


def test_help_speaks_this_projects_terms(capsys: pytest.CaptureFixture[str]) -> None:
    import typer.main

    from bus.surfaces.cli.app import app

    def helps(cmd: object) -> list[str]:
        out = [str(getattr(cmd, "help", "") or "")]
        out += [str(getattr(p, "help", "") or "") for p in getattr(cmd, "params", [])]
        for sub in getattr(cmd, "commands", {}).values():
            out += helps(sub)
        return out

    text = "\n".join(helps(typer.main.get_command(app)))
    for word in ("SPEC", "Luke", "prox"):
        assert word not in text
