"""How long an idle interactive Codex takes to hear a blocker: the real ``codex`` (npm,
``INBOX_TEST_CLI_DIR``) in tmux, its hooks installed and trusted as docs/harnesses.md
says, against the scripted Responses API of tests/support/model_stub.py, a real worker and
scheduler.

    python bench/codex_wake.py [--runs N] [--debounce S] [--redis-url URL]

For plain ``codex`` (its threads in Codex's background server) and ``codex --no-daemon``:
a first turn, then ``--runs`` times a blocker to the idle session, timed from the send to
the woken turn's request reaching the model, and the woken turn's end awaited. Prints
each mode's figures and their median and max less the debounce (the bound
docs/harnesses.md gives). Redis: ``--redis-url``, else ``INBOX_BENCH_REDIS_URL``, else
127.0.0.1:6379; keys under a fresh prefix, deleted at the end, as is the temp home.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bus.api import Bus  # noqa: E402
from bus.core.settings import Settings  # noqa: E402
from bus.delivery.scheduler import run as run_scheduler  # noqa: E402
from tests.support.harness_support import INBOX, Tmux, bare_env, find_cli  # noqa: E402
from tests.support.model_stub import ModelStub, request_text  # noqa: E402
from tests.support.worker_proc import WorkerProcess, inbox_worker_argv  # noqa: E402
from workers.app import make_app  # noqa: E402
from workers.dispatch import CeleryDispatcher  # noqa: E402


def wait(pred: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


def setup(base: Path, codex: Path, stub: ModelStub, s: Settings) -> tuple[Path, dict[str, str]]:
    project, home = base / "project", base / "user"
    (project / ".codex").mkdir(parents=True)
    (home / ".codex").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(project)], check=True, timeout=30)
    (home / ".codex" / "config.toml").write_text(
        f'model = "stub-model"\nmodel_provider = "stub"\n[model_providers.stub]\nname = "stub"\n'
        f'base_url = "{stub.url}/v1"\nwire_api = "responses"\nenv_key = "STUB_API_KEY"\n'
    )
    env = bare_env(home, CODEX_HOME=str(home / ".codex"), STUB_API_KEY="sk-stub")
    done = subprocess.run(
        [str(INBOX), "hooks", "codex", "--install", str(project / ".codex" / "hooks.json"),
         "--yes"],
        env={**s.child_env(), **env, "PATH": f"{codex.parent}:/usr/bin:/bin"},
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    out = done.stdout
    printed = out[
        min(i for i in (out.find("# Codex reads"), out.find("[hooks.state.")) if i >= 0) :
    ]
    with (home / ".codex" / "config.toml").open("a") as f:
        f.write("\n" + printed)  # the documented way: the printed lines pasted
    return project, env


def end_under(folder: str) -> None:
    """Codex's background server and its updater, both run from under ``folder``."""
    import psutil

    left = []
    for proc in psutil.process_iter(["cmdline"]):
        argv = proc.info.get("cmdline") or []
        if argv and argv[0].startswith(folder):
            with contextlib.suppress(psutil.Error):
                proc.kill()
                left.append(proc)
    psutil.wait_procs(left, timeout=30)


def measure(mode: str, codex: Path, s: Settings, bus: Bus, runs: int) -> list[float]:
    took: list[float] = []
    with ModelStub() as stub, tempfile.TemporaryDirectory(prefix="codex-wake-") as tmp:
        project, env = setup(Path(tmp), codex, stub, s)
        argv = [str(codex)] + (["--no-daemon"] if mode == "no-daemon" else [])
        tmux = Tmux(argv, project, env)
        try:
            tmux.wait_screen(lambda x: "›" in x, 120, "the prompt")
            before = set(bus.store.sessions.session_ids())
            tmux.type("please run: echo first-turn")
            wait(lambda: set(bus.store.sessions.session_ids()) - before, 90, "the session")
            [sid] = set(bus.store.sessions.session_ids()) - before
            wait(lambda: bus.session(sid).state == "idle" and bus.session(sid).turns, 90, "idle")
            for n in range(runs):
                sent = time.monotonic()
                bus.send({"from": "b:lead", "to_id": sid, "class": "blocker", "text": f"b{n}x"})
                stub.wait_for(lambda b, n=n: f"b{n}x" in request_text(b), 120, "the woken turn")
                took.append(time.monotonic() - sent)
                wait(lambda: bus.session(sid).state == "idle", 120, "the woken turn's end")
        finally:
            tmux.close()
            subprocess.run([str(codex), "app-server", "daemon", "stop"], env=env,
                           capture_output=True, timeout=60, check=False)  # fmt: skip
            end_under(tmp)
    return took


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--debounce", type=float, default=1.0)
    p.add_argument("--redis-url", default=os.environ.get("INBOX_BENCH_REDIS_URL"))
    a = p.parse_args()
    url = a.redis_url or "redis://127.0.0.1:6379/0"
    home = Path(tempfile.mkdtemp(prefix="codex-wake-home-"))
    s = Settings(home=home, host="bencha", redis_url=url, broker_url=url,
                 key_prefix=f"bench-{uuid.uuid4().hex[:8]}:", wake_debounce_s=a.debounce,
                 fyi_flush_s=600.0, memory_settings=False)  # fmt: skip
    codex = find_cli("codex")
    worker = WorkerProcess(s, inbox_worker_argv("prefork", 1))
    bus = Bus(s, dispatcher=CeleryDispatcher(make_app(s)))
    stop = threading.Event()
    sched = threading.Thread(
        target=run_scheduler, args=(bus.delivery, stop), kwargs={"max_sleep_s": 0.05}, daemon=True
    )
    sched.start()
    try:
        for mode in ("daemon", "no-daemon"):
            took = measure(mode, codex, s, bus, a.runs)
            less = [t - a.debounce for t in took]
            print(
                f"{mode:10} send → woken request: {', '.join(f'{t:.2f}' for t in took)} s; "
                f"less the {a.debounce:g} s debounce: median {statistics.median(less):.2f} s, "
                f"max {max(less):.2f} s"
            )
    finally:
        stop.set()
        sched.join(5)
        worker.stop()
        for key in bus.store.r.scan_iter(f"{s.key_prefix}*"):
            bus.store.r.delete(key)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
