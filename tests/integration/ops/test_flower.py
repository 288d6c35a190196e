"""Flower runs with authentication and on loopback by default."""

from __future__ import annotations

import inspect
import os
import socket
import stat
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from bus.core.errors import BadInput
from bus.core.settings import Settings
from bus.ops.flower import flower_argv, flower_env, resolve_auth, run_flower


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_argv_has_auth_and_loopback_by_default(settings: Settings) -> None:
    params = inspect.signature(run_flower).parameters
    assert params["address"].default == "127.0.0.1"
    argv = flower_argv(settings, params["address"].default, 5555)
    assert not any("basic-auth" in a or "u:p" in a for a in argv)  # not in `ps`
    assert flower_env(settings, auth="u:p")["FLOWER_BASIC_AUTH"] == "u:p"
    assert "--address=127.0.0.1" in argv and "--port=5555" in argv
    assert argv[argv.index("-A") + 1 : argv.index("-A") + 3] == ["workers", "flower"]


@pytest.mark.parametrize("auth", ["nocolon", ":p", "u:", "a:b,c"])
def test_refuses_auth_without_user_and_password(settings: Settings, auth: str) -> None:
    with pytest.raises(BadInput):
        resolve_auth(settings, auth)


def test_generated_credential_is_private_and_not_printed(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("INBOX_FLOWER_AUTH", raising=False)
    auth = resolve_auth(settings, None)
    user, _, password = auth.partition(":")
    assert user == "inbox" and len(password) == 16
    path = Path(settings.home) / "flower.auth"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert path.read_text().strip() == auth
    out = capsys.readouterr().out
    assert out.strip() == f"flower: user inbox, password in {path}"
    assert password not in out
    # A second run makes a new one, still private.
    assert resolve_auth(settings, None) != auth
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_env_credential_wins_over_generating(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INBOX_FLOWER_AUTH", "ops:secret")
    assert resolve_auth(settings, None) == "ops:secret"
    assert resolve_auth(settings, "me:mine") == "me:mine"
    assert not (Path(settings.home) / "flower.auth").exists()


@pytest.mark.slow
def test_real_flower_demands_credentials(settings: Settings) -> None:
    port = free_port()
    argv = flower_argv(settings, "127.0.0.1", port)
    proc = subprocess.Popen(
        argv,
        env=flower_env(settings, auth="admin:s3cret"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, f"flower exited:\n{proc.communicate()[0]}"
            try:
                first = httpx.get(url, timeout=2)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "flower did not answer within 60 s"
                time.sleep(0.2)
        assert first.status_code == 401
        assert httpx.get(url, auth=("admin", "wrong"), timeout=5).status_code == 401
        assert httpx.get(url, auth=("admin", "s3cret"), timeout=10).status_code == 200
    finally:
        proc.kill()
        proc.communicate(timeout=10)


def test_run_flower_returns_the_child_exit_code(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    import bus.ops.flower as flower_mod

    seen: list[list[str]] = []

    def fake_argv(s: Settings, address: str, port: int) -> list[str]:
        seen.append(flower_argv(s, address, port))
        check = (
            "import os, sys; "
            "sys.exit(3 if os.environ['INBOX_BROKER_URL'] and "
            "os.environ['FLOWER_BASIC_AUTH'] == 'u:p' else 1)"
        )
        return [sys.executable, "-c", check]

    monkeypatch.setattr(flower_mod, "flower_argv", fake_argv)
    assert run_flower(settings, port=5999, basic_auth="u:p") == 3
    assert "--port=5999" in seen[0]
