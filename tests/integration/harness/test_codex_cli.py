"""The real Codex CLI (npm ``@openai/codex``) as its users run it: the hooks exactly as
``inbox hooks codex --install`` wrote them into a project's ``.codex/hooks.json``, trusted
the documented way (the lines the install prints, pasted into ``$CODEX_HOME/config.toml``)
and no bypass flags; plain ``codex`` in tmux (its threads in Codex's background server),
``codex --no-daemon`` and ``codex exec``, against a scripted stand-in for the Responses
API on 127.0.0.1 (a model provider with a ``base_url``), a real worker and a real
scheduler."""

from __future__ import annotations

import contextlib
import json
import shlex
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from bus.api import Bus
from bus.core.settings import Settings
from tests.support.celery_bus import Scheduler, celery_bus, events
from tests.support.harness_support import (
    INBOX,
    Tmux,
    bare_env,
    find_cli,
    install_hooks,
    only_session,
)
from tests.support.model_stub import ModelStub, request_text
from tests.support.waiting import wait_for
from tests.support.worker_proc import WorkerProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
DEBOUNCE_S = 1.0
EVENTS = ("SessionStart", "UserPromptSubmit", "PostToolUse", "Stop", "SessionEnd")


@dataclass
class Codex:
    bin: Path
    project: Path
    home: Path
    stub: ModelStub
    settings: Settings
    bus: Bus
    own_marker: Path

    @property
    def hooks_file(self) -> Path:
        return self.project / ".codex" / "hooks.json"

    def env(self) -> dict[str, str]:
        return bare_env(self.home, CODEX_HOME=str(self.home / ".codex"), STUB_API_KEY="sk-stub")

    def install(self) -> subprocess.CompletedProcess[str]:
        """``inbox hooks codex --install .codex/hooks.json --yes`` as the person runs it,
        their codex on PATH and their CODEX_HOME."""
        done = subprocess.run(
            [str(INBOX), "hooks", "codex", "--install", str(self.hooks_file), "--yes"],
            env={**self.settings.child_env(), **self.env(),
                 "PATH": f"{self.bin.parent}:/usr/bin:/bin"},
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done

    def trust(self) -> str:
        """The documented way: the lines the install printed, pasted into config.toml."""
        out = self.install().stdout
        start = min(i for i in (out.find("# Codex reads"), out.find("[hooks.state.")) if i >= 0)
        printed = out[start:]
        with (self.home / ".codex" / "config.toml").open("a") as f:
            f.write("\n" + printed)
        return printed

    def trust_own_hook(self) -> None:
        """The person trusted their own hook long before (Codex would ask about it at
        each start otherwise)."""
        from bus.surfaces.harness.codex_trust import hook_entries, trust_toml

        entries = hook_entries(str(self.bin), self.project, env=self.env())
        own = [e for e in entries if "touch" in str(e.get("command"))]
        assert len(own) == 1 and all(e["trustStatus"] != "trusted" for e in own)
        with (self.home / ".codex" / "config.toml").open("a") as f:
            f.write("\n" + trust_toml(own))

    def stop_daemon(self) -> None:
        """Codex's background server (and its updater, which ``daemon stop`` leaves)
        outlives the windows that started it: both are ended."""
        import psutil

        subprocess.run(
            [str(self.bin), "app-server", "daemon", "stop"],
            env=self.env(), capture_output=True, timeout=60, check=False,
        )  # fmt: skip
        left = []
        for proc in psutil.process_iter(["cmdline"]):
            argv = proc.info.get("cmdline") or []
            if argv and argv[0].startswith(str(self.home)):
                with contextlib.suppress(psutil.Error):
                    proc.kill()
                    left.append(proc)
        psutil.wait_procs(left, timeout=30)

    def exec(self, prompt: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [str(self.bin), "exec", "--skip-git-repo-check", "--json", prompt],
            cwd=self.project, env=self.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip

    def resume_cmd(self, sid: str) -> str:
        """The headless wake command a person gives the session: ``codex exec resume <id>
        -`` in the project, the notice on stdin, in the person's environment."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env().items())
        return (
            f"cd {shlex.quote(str(self.project))} && env -i {env} {shlex.quote(str(self.bin))}"
            f" exec resume --skip-git-repo-check {sid} -"
        )


@pytest.fixture
def codex(
    settings: Settings, start_worker: Callable[..., WorkerProcess], tmp_path: Path
) -> Iterator[Codex]:
    binary = find_cli("codex")
    s = replace(settings, wake_debounce_s=DEBOUNCE_S, fyi_flush_s=600.0)
    project, home = tmp_path / "project", tmp_path / "user"
    (project / ".codex").mkdir(parents=True)
    (home / ".codex").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(project)], check=True, timeout=30)
    marker = tmp_path / "own-hook-ran"
    # A person's own hook, there before the install: it must stay and keep running.
    own = {"type": "command", "command": f"touch {marker}"}
    (project / ".codex" / "hooks.json").write_text(
        json.dumps({"hooks": {"UserPromptSubmit": [{"hooks": [own]}]}})
    )
    with ModelStub() as stub:
        # The project is not trusted yet: the lines the install prints trust it too.
        (home / ".codex" / "config.toml").write_text(
            'model = "stub-model"\nmodel_provider = "stub"\n'
            "[model_providers.stub]\n"
            f'name = "stub"\nbase_url = "{stub.url}/v1"\nwire_api = "responses"\n'
            'env_key = "STUB_API_KEY"\n'
        )
        for _ in range(2):  # installing twice leaves one entry per event
            install_hooks("codex", project / ".codex" / "hooks.json", s)
        start_worker(s)
        scheduler = Scheduler(s)
        codex = Codex(binary, project, home, stub, s, celery_bus(s), marker)
        try:
            codex.trust()
            codex.trust_own_hook()
            yield codex
        finally:
            codex.stop_daemon()
            scheduler.stop()


def _ours(hooks: dict[str, Any], event: str) -> list[dict[str, Any]]:
    return [
        h for g in hooks.get(event, []) for h in g["hooks"] if f"hook codex {event}" in h["command"]
    ]


def _own(hooks: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        h for g in hooks.get("UserPromptSubmit", []) for h in g["hooks"] if "touch" in h["command"]
    ]


def test_install_twice_is_one_entry_per_event_and_uninstall_keeps_the_persons_hook(
    codex: Codex,
) -> None:
    hooks = json.loads(codex.hooks_file.read_text())["hooks"]
    assert len(_own(hooks)) == 1
    for event in EVENTS:
        [entry] = _ours(hooks, event)
        # The absolute path of the inbox that installed it, and the settings locating the bus.
        assert entry["command"].split(" hook codex ")[0].endswith(str(INBOX))
        assert f"INBOX_KEY_PREFIX={codex.settings.key_prefix}" in entry["command"]
    done = subprocess.run(
        [str(INBOX), "hooks", "codex", "--uninstall", str(codex.hooks_file), "--yes"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    left = json.loads(codex.hooks_file.read_text())["hooks"]
    assert all(not _ours(left, e) for e in EVENTS) and len(_own(left)) == 1
    assert set(left) == {"UserPromptSubmit"}


def test_exec_hears_a_mid_turn_notice_and_answers_the_waited_send(
    codex: Codex, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    proc = codex.exec(f"please run: until [ -e {go} ]; do sleep 0.05; done; echo tool-finished")
    try:
        bus = codex.bus
        sid = only_session(bus)
        codex.stub.wait_for(lambda b: "please run: until" in request_text(b), 60, "turn 1")
        wait_for(lambda: bus.session(sid).state == "running", 30, what="the turn started")
        assert codex.own_marker.exists()  # the person's own hook ran too
        result: dict[str, Any] = {}
        waited = threading.Thread(
            target=lambda: result.update(
                bus.send(
                    {"from": "hostb:lead", "to_id": sid, "text": "status? (waited)"},
                    wait=True,
                    timeout=120,
                )
            )
        )
        waited.start()
        bus.send({"from": "hostb:peer", "to_id": sid, "text": "the build is red", "class": "fyi"})
        wait_for(
            lambda: sum(len(x["notice"]["messages"]) for x in bus.floor.peek(sid)
                        if x.get("kind") == "notice") == 2,
            30,
            what="both messages in notices on the floor",
        )  # fmt: skip
        go.touch()
        after_tool = codex.stub.wait_for(_is_result, 60, "the tool result's request")
        text = request_text(after_tool)
        assert text.count("[inbox ·") == 1 and "2 new in 2 threads" in text
        assert "status? (waited)" in text and "the build is red" in text
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        waited.join(120)
        assert result["state"] == "answered" and result["answer"] == "done"
        wait_for(lambda: bus.session(sid).state == "closed", 30, what="SessionEnd closed it")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)


def _is_result(body: dict[str, Any]) -> bool:
    items = [i for i in body.get("input") or [] if isinstance(i, dict)]
    return any(i.get("type") == "function_call_output" for i in items) and "tool-finished" in (
        json.dumps([i for i in items if i.get("type") == "function_call_output"])
    )


def test_a_notice_during_a_command_codex_hands_back_reaches_the_model_before_the_turn_ends(
    codex: Codex,
) -> None:
    # Codex hands a command still running after ~10 s back to the model and runs no
    # PostToolUse for that step; the turn's Stop says what came meanwhile.
    proc = codex.exec("please run: sleep 14; echo long-finished")
    try:
        bus = codex.bus
        sid = only_session(bus)
        wait_for(lambda: bus.session(sid).state == "running", 60, what="the turn started")
        codex.stub.wait_for(lambda b: "sleep 14" in request_text(b), 60, "the command")
        bus.send({"from": "hostb:lead", "to_id": sid, "class": "blocker", "text": "long-blocked"})
        heard = codex.stub.wait_for(
            lambda b: "long-blocked" in request_text(b), 90, "the notice at the turn's end"
        )
        assert request_text(heard).count("long-blocked") == 1
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert sum("long-blocked" in request_text(b) for b in codex.stub.main_requests()) == 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)


def test_a_headless_session_is_woken_by_its_wake_command_and_stays_open_for_the_next(
    codex: Codex,
) -> None:
    bus = codex.bus
    proc = codex.exec("say hello")
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    sid = only_session(bus)
    # Its Stop ended the turn (and SessionEnd closed it, when its 3 s were enough).
    wait_for(lambda: bus.session(sid).state in ("idle", "closed"), 60, what="the run's end")

    # The person gives the session its wake command, as the README says.
    done = subprocess.run(
        [str(INBOX), "session", "open", sid, "--wake-cmd", codex.resume_cmd(sid)],
        env=codex.settings.child_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    seen = len(codex.stub.main_requests())

    # An FYI does not wake it.
    bus.send({"from": "hostb:peer", "to_id": sid, "text": "fyi: lunch", "class": "fyi"})
    with pytest.raises(AssertionError):
        codex.stub.wait_for(lambda b: "fyi: lunch" in request_text(b), DEBOUNCE_S + 3, "no wake")
    assert len(codex.stub.main_requests()) == seen

    # A blocker runs the wake command: the resumed turn's request carries the notice.
    bus.send({"from": "hostb:lead", "to_id": sid, "class": "blocker", "text": "schema blocked"})
    woken = codex.stub.wait_for(
        lambda b: "schema blocked" in request_text(b), DEBOUNCE_S + 90, "the resumed turn"
    )
    text = request_text(woken)
    assert "[inbox · 2 new in 2 threads" in text and "fyi: lunch" in text
    assert "say hello" in text  # the same thread, resumed
    assert text.count("schema blocked") == 1  # the prompt is the notice, said once
    # The run ends (Stop, SessionEnd); the session stays open, idle, for the next wake.
    wait_for(lambda: bus.session(sid).state == "idle", 120, what="the resumed turn's end")
    assert bus.session(sid).wake_cmd == codex.resume_cmd(sid)
    bus.send({"from": "hostb:lead", "to_id": sid, "class": "blocker", "text": "still blocked"})
    codex.stub.wait_for(
        lambda b: "still blocked" in request_text(b), DEBOUNCE_S + 90, "the second wake"
    )
    wait_for(lambda: bus.session(sid).state == "idle", 120, what="the second run's end")


def _woken_by_a_blocker_not_an_fyi(codex: Codex, sid: str, tag: str) -> float:
    """An FYI to the idle session starts no turn; a blocker does, its prompt the one
    notice of both (each said once). The seconds from the blocker's send to its request."""
    bus, stub = codex.bus, codex.stub
    seen = len(stub.main_requests())
    bus.send({"from": "hostb:peer", "to_id": sid, "text": f"fyi: lunch {tag}", "class": "fyi"})
    with pytest.raises(AssertionError):
        stub.wait_for(lambda b: f"lunch {tag}" in request_text(b), DEBOUNCE_S + 3, "no wake")
    assert len(stub.main_requests()) == seen
    sent = time.monotonic()
    bus.send({"from": "hostb:lead", "to_id": sid, "class": "blocker", "text": f"blocked {tag}"})
    woken = stub.wait_for(lambda b: f"blocked {tag}" in request_text(b), 60, "the woken turn")
    took = time.monotonic() - sent
    text = request_text(woken)
    assert "[inbox · 2 new in 2 threads" in text and f"fyi: lunch {tag}" in text
    assert text.count(f"blocked {tag}") == 1  # the queued prompt is the notice, said once
    assert '"turn_trigger":"queue"' in text.replace(" ", "").replace('\\"', '"')
    wait_for(lambda: bus.session(sid).state == "idle", 60, what="the woken turn's end")
    return took


def _first_turn(codex: Codex, tmux: Tmux) -> str:
    tmux.wait_screen(lambda s: "›" in s, 120, "the prompt")
    tmux.type("please run: echo first-turn")
    try:
        codex.stub.wait_for(lambda b: "first-turn" in request_text(b), 90, "turn 1")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the screen:\n{tmux.screen()}") from None
    sid = only_session(codex.bus)
    tmux.wait_screen(lambda s: "Worked for" in s, 90, "turn 1's end")
    wait_for(lambda: codex.bus.session(sid).state == "idle", 60, what="the turn's end")
    return sid


def _quit(tmux: Tmux) -> None:
    tmux.type("/quit")
    deadline = time.monotonic() + 60
    while tmux.alive():
        assert time.monotonic() < deadline, "codex did not quit"
        time.sleep(0.1)


def test_plain_codex_in_its_background_server_is_woken_and_its_quit_ends_the_session(
    codex: Codex,
) -> None:
    bus = codex.bus
    tmux = Tmux([str(codex.bin)], codex.project, codex.env())
    try:
        sid = _first_turn(codex, tmux)
        info = bus.session(sid)
        # The hooks ran in Codex's background server, and found the window all the same.
        assert " queue --thread " in (info.wake_cmd or "") and info.wake_problem is None
        took = _woken_by_a_blocker_not_an_fyi(codex, sid, "daemon")
        assert took < DEBOUNCE_S + 10, took
        tmux.wait_screen(lambda s: "blocked daemon" in s, 30, "the woken turn in the window")
        _quit(tmux)
        # Nobody has it open: the worker closes it, no message needed (its holders ended),
        # and a blocker then runs no turn.
        wait_for(lambda: bus.session(sid).state == "closed", 30, what="the session closed")
        assert events(bus, sid, "session_gone")
        seen = len(codex.stub.main_requests())
        bus.send({"from": "hostb:lead", "to_id": sid, "class": "blocker", "text": "after quit"})
        # Kept on its floor for its next start, and no turn ran for it.
        wait_for(lambda: "after quit" in json.dumps(bus.floor.peek(sid)), 30, what="the floor")
        assert len(codex.stub.main_requests()) == seen
    finally:
        tmux.close()


def test_codex_without_its_background_server_is_woken_through_its_queue(codex: Codex) -> None:
    tmux = Tmux([str(codex.bin), "--no-daemon"], codex.project, codex.env())
    try:
        sid = _first_turn(codex, tmux)
        assert " queue --thread " in (codex.bus.session(sid).wake_cmd or "")
        took = _woken_by_a_blocker_not_an_fyi(codex, sid, "nodaemon")
        assert took < DEBOUNCE_S + 30, took
        _quit(tmux)
        wait_for(lambda: codex.bus.session(sid).state == "closed", 30, what="SessionEnd")
    finally:
        tmux.close()


def test_the_lines_the_install_prints_trust_the_project_and_the_inbox_hooks_first_try(
    codex: Codex,
) -> None:
    # The fixture pasted them (Codex.trust) into a config that trusted no project: the
    # project's table came with them, and now Codex lists every inbox hook as trusted
    # (the person's own hook has its own table).
    config = (codex.home / ".codex" / "config.toml").read_text()
    assert f'[projects."{codex.project}"]' in config
    assert config.count("[hooks.state.") == len(EVENTS) + 1
    again = codex.install().stdout
    assert "already trusts every inbox hook" in again and "[hooks.state." not in again
    # Uninstalled, the trust tables go too (the person's config otherwise as it was).
    done = subprocess.run(
        [str(INBOX), "hooks", "codex", "--uninstall", str(codex.hooks_file), "--yes"],
        env={**codex.settings.child_env(), **codex.env()},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    left = (codex.home / ".codex" / "config.toml").read_text()
    assert left.count("[hooks.state.") == 1 and f'[projects."{codex.project}"]' in left
    assert "user_prompt_submit:0:0" in left  # the person's hook's, where it still is
    assert 'model_provider = "stub"' in left
