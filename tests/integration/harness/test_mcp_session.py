"""``inbox mcp`` acts as the session the harness's hooks registered, with no INBOX_SESSION.

This test process plays the harness (Claude Code or Codex): it runs the hooks as Claude
Code does (``sh -c '<inbox> hook claude EVENT'``, the event's JSON on stdin) and starts
``inbox mcp`` as its stdio child, driven by the MCP SDK's own client; neither is given the
session id but through the hook's JSON.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from bus.api import Bus
from bus.core.settings import Settings
from bus.surfaces.harness import link as harness_link
from tests.support.mcp_client import call, mcp_client, ok

INBOX = Path(sys.executable).parent / "inbox"


def hook(
    settings: Settings, event: str, payload: dict[str, object], harness: str = "claude"
) -> None:
    """Run ``inbox hook HARNESS EVENT`` through ``sh -c``, as the harness does."""
    env = {k: v for k, v in settings.child_env().items()}
    env.pop("INBOX_SESSION", None)
    done = subprocess.run(
        ["sh", "-c", f"{shlex.quote(str(INBOX))} hook {harness} {event}"],
        input=json.dumps(payload),
        env={**os.environ, **env, "INBOX_DISPATCHER": "none"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "failed" not in done.stderr, done.stderr


def sender(bus: Bus, to: str) -> dict[str, object]:
    *_, (_eid, fields) = bus.store.r.xrange(bus.store.k.s(to, "stream"))
    wire = json.loads(fields["m"])
    assert isinstance(wire, dict)
    return wire


@pytest.mark.anyio
@pytest.mark.parametrize("harness", ["claude", "codex"])
async def test_mcp_sends_as_the_session_the_hooks_registered(
    settings: Settings, bus: Bus, harness: str, anyio_backend: str
) -> None:
    bus.open_session("peer", handle="hosta:peer")
    first = "0b9c2f1e-cc01-4d2a-9f51-1a2b3c4d5e6f"
    hook(settings, "SessionStart", {"session_id": first, "source": "startup"}, harness)
    handle = bus.store.sessions.get_session(first).handle  # type: ignore[union-attr]
    async with mcp_client(settings, None) as client:
        answer = ok(await call(client, "send", to_id="peer", text="from the hook's session"))
        wire = sender(bus, "peer")
        assert (wire["from_session"], wire["from"], wire["id"]) == (first, handle, answer["id"])

        # A /clear starts a new session in the same harness process: the next call acts
        # as it, the MCP server unchanged.
        second = "7d1e0a2b-cc02-4e3f-8a60-2b3c4d5e6f70"
        hook(settings, "SessionStart", {"session_id": second, "source": "clear"}, harness)
        ok(await call(client, "send", to_id="peer", text="after clear"))
        assert sender(bus, "peer")["from_session"] == second

        # Its end removes the record: the server no longer acts for it.
        hook(settings, "SessionEnd", {"session_id": second, "reason": "exit"}, harness)
        ok(await call(client, "send", to_id="peer", text="anonymous"))
        after = sender(bus, "peer")
        assert "from_session" not in after and after["from"] == "hosta:inbox"


def test_a_record_names_the_harness_process_and_outlives_no_process(home: Path) -> None:
    # Written through a shell, read by a direct child: both find this process.
    code = (
        "import sys; from pathlib import Path; from bus.surfaces.harness import link as h; "
        "print(h.{}(Path(sys.argv[1]){}))"
    )
    write = code.format("record", ", 'sess-1'")
    subprocess.run(
        ["sh", "-c", f"{shlex.quote(sys.executable)} -c {shlex.quote(write)} {home}"],
        check=True,
        timeout=60,
    )
    read = subprocess.run(
        [sys.executable, "-c", code.format("recorded", ""), str(home)],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert read.stdout.strip() == "sess-1"
    # A record of a process that is gone (here: this pid with another start time, as a
    # reused pid would have) is removed by the next record.
    stale = home / harness_link.FOLDER / f"{os.getpid()}-1"
    stale.write_text("sess-old")
    subprocess.run(
        ["sh", "-c", f"{shlex.quote(sys.executable)} -c {shlex.quote(write)} {home}"],
        check=True,
        timeout=60,
    )
    assert not stale.exists()


def test_under_codexs_background_server_the_mcp_server_acts_only_for_the_one_open_window(
    home: Path, tmp_path: Path
) -> None:
    """Codex's background server hosts every window's thread and starts each thread's MCP
    server itself: a record per session, and the one whose window is open is acted as;
    with two open, none (never the other window's)."""
    from bus.delivery import kept_wake
    from bus.delivery.floor import Floor

    py = shlex.quote(sys.executable)
    hook = "from pathlib import Path; from bus.surfaces.harness import link as h; "
    record = hook + "import sys; h.record(Path(sys.argv[1]), sys.argv[2])"
    read = hook + "import sys; print(h.recorded(Path(sys.argv[1])))"
    server = tmp_path / "server.py"
    # A stand-in for the server: its hooks and MCP servers are its children.
    server.write_text(
        "import subprocess, sys\n"
        f"rec, read, home = {record!r}, {read!r}, sys.argv[3]\n"
        "for sid in sys.argv[4:]:\n"
        f"    subprocess.run([{sys.executable!r}, '-c', rec, home, sid], check=True)\n"
        f"subprocess.run([{sys.executable!r}, '-c', read, home], check=True)\n"
    )
    floor = Floor(home)
    gone = subprocess.Popen(["true"])
    gone.wait(30)
    kept_wake.keep_holders(floor, "sess-a", [(gone.pid, 1.0)])  # its window quit

    # Run as ``python -c CODE app-server --managed-daemon``: ``-c CODE`` reads as one of
    # codex's own options, so the command line is the server's (codex_wake.is_daemon).
    code = shlex.quote(f"exec(open({str(server)!r}).read())")

    def run(*sids: str) -> str:
        done = subprocess.run(
            f"{py} -c {code} app-server --managed-daemon {home} {' '.join(sids)}",
            shell=True, check=True, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        return done.stdout.strip()

    assert run("sess-a", "sess-b") == "sess-b"  # a's window is gone: b is the one open
    assert run("sess-a", "sess-b", "sess-c") == "None"  # b and c both open: neither
