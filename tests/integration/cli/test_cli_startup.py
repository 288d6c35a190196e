"""What the everyday read commands import: through the fast lane (bus.lanes.read)
not even redis-py, pydantic, typer or rich; on the full command line never the serving,
picture or worker stacks.

Each command runs as a real ``inbox`` process against a real Redis, under
``python -X importtime``, whose report on stderr names every module the process imported.
The timing goals themselves live in bench/hooks.py.
"""

from __future__ import annotations

import json

import pytest

from bus.api import Bus
from bus.core.settings import Settings
from tests.support.import_trace import LIBRARY, NEVER, heavy, imported


@pytest.fixture
def env(settings: Settings) -> dict[str, str]:
    return settings.child_env()


@pytest.fixture
def thread(bus: Bus) -> tuple[str, str]:
    """A message from ``bob`` to ``alice``, read into alice's threads: (thread, message id)."""
    for sid in ("alice", "bob"):
        bus.open_session(sid)
    sent = bus.send(
        {
            "from": f"{bus.settings.host}:bob",
            "from_session": "bob",
            "to_id": "alice",
            "text": "CI is red on main",
        }
    )
    bus.deliver_session("alice")
    return str(sent["thread"]), str(sent["id"])


def test_the_importtime_report_is_read() -> None:
    # The parse above must see a module every command imports, or the checks prove nothing.
    _, modules = imported({}, "--help")
    assert {"bus.lanes.entry", "bus.surfaces.cli.app", "typer"} <= modules


READS = [
    ("status",),
    ("threads", "alice"),
    ("read", "alice", "{thread}"),
    ("sent", "bob"),
    ("receipt", "{msg}", "--by", "bob"),
    ("read-inbox", "alice"),
]


@pytest.mark.parametrize("argv", READS)
def test_the_read_lane_imports_none_of_the_library(
    env: dict[str, str], thread: tuple[str, str], argv: tuple[str, ...]
) -> None:
    thr, msg = thread
    out, modules = imported(env, *[a.format(thread=thr, msg=msg) for a in argv])
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
    assert json.loads(out.stdout)["ok"] is True
    assert "bus.lanes.read" in modules  # the parse above sees the lane's modules
    assert heavy(modules, LIBRARY + NEVER) == []


@pytest.mark.parametrize("argv", [*READS, ("status", "--help"), ("threads", "--help")])
def test_a_read_command_imports_no_serving_picture_or_worker_module(
    env: dict[str, str], thread: tuple[str, str], argv: tuple[str, ...]
) -> None:
    thr, msg = thread
    args = [a.format(thread=thr, msg=msg) for a in argv]
    out, modules = imported({**env, "INBOX_FAST_READ": "0"}, *args)
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
    if "--help" not in args:
        assert json.loads(out.stdout)["ok"] is True
    assert "bus.surfaces.cli.app" in modules  # the full command line answered, not a fast lane
    assert heavy(modules) == []


def test_a_refusal_imports_none_of_them_either(env: dict[str, str]) -> None:
    out, modules = imported(env, "threads", "nosuch")
    assert out.returncode == 1 and json.loads(out.stdout)["error"] == "not_found"
    assert heavy(modules) == []
