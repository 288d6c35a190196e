"""The child processes of ``bench/swarm_hosts.py``: a host's harness and a sender.

Both run inside a host's network namespace with that host's ``INBOX_*`` settings, so
everything they do reaches the store over the host's own link.

- :func:`role_harness` plays the harnesses of every session of its host: a socket
  listener that acks for each ``sock`` session (heartbeat on, as ``inbox listen``), a
  tool step every ``--step`` seconds draining each ``floor`` session in its running turn,
  and for each ``wake`` session, woken by its wake command, a drain and the turn's end
  (with an answer, which a waited send gets). It replies (``Bus.reply``) to messages
  whose id starts ``rq-``, and keeps its idle sessions seen. Everything heard goes to
  ``--out`` as ``{"sid", "t", "ids", "n", "k"}`` (``n``: notice lines at that step);
  its replies to ``sent-reply-<host>.txt`` beside it, as a sender logs.
- :func:`role_sender` sends ``--count`` traced messages at ``--rate``: resends (the same
  id again), reply requests, waited sends (``wait``, in a thread of their own), notes a
  session of the sender's host sends itself (``ns-``, ``from_session`` its recipient) and, once
  a send's answer shows its recipient ``stale``, no more to that session (logged to
  ``learn-<index>.txt``).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.chaos import ids_of, recover_taken, retrying
from bus.api import Bus
from bus.core.settings import Settings
from bus.delivery.floor import DRAINING_PREFIX, MESSAGES
from bus.surfaces.harness.listener import Listener

FULL_DRAIN_EVERY_S = 20.0  # a drain even when the file looks empty (orphaned claims)


def _now() -> float:
    return time.time()


class _Log:
    def __init__(self, path: Path) -> None:
        self.f = open(path, "a", buffering=1)  # noqa: SIM115 - open for the process's life
        self.lock = threading.Lock()

    def write(self, line: str) -> None:
        with self.lock:
            self.f.write(line + "\n")


def role_harness(args: argparse.Namespace) -> int:
    spec: dict[str, list[str]] = json.loads(Path(args.targets).read_text())
    settings = Settings.from_env()
    bus = Bus(settings)
    out_path = Path(args.out)
    wakes_dir = Path(args.wakes)
    replies: queue.Queue[tuple[str, str]] = queue.Queue()
    with open(out_path, "a", buffering=1) as raw_out:
        recover_taken(bus, spec["floor"], out_path, raw_out)
    out = _Log(out_path)
    sent = _Log(out_path.parent / f"sent-reply-{settings.host}.txt")

    def heard(sid: str, kind: str, lines: list[dict[str, Any]], t: float) -> None:
        ids = [i for line in lines for i in ids_of(line)]
        if not ids:
            return
        n = sum(1 for line in lines if line.get("kind") == "notice")
        out.write(json.dumps({"sid": sid, "t": t, "ids": ids, "n": n, "k": kind}))
        for mid in ids:
            if mid.startswith("rq-"):
                replies.put((sid, mid))

    def on_line(sid: str) -> Any:
        def handle(obj: dict[str, Any]) -> bool:
            heard(sid, "sock", [obj], _now())
            return True

        return handle

    listeners = [Listener.for_session(bus.floor, s, on_line(s)).start() for s in spec["sock"]]
    for sid in spec["sock"]:
        bus.receipts.heartbeat(sid)

    def replier() -> None:
        while True:
            sid, mid = replies.get()
            try:
                answer = retrying(
                    lambda s=sid, m=mid: bus.store.queue.first_answer(s, m), time.monotonic() + 60
                )
                res = retrying(
                    lambda s=sid, m=mid, a=answer: bus.reply(s, a["thread"], f"re {m}"),
                    time.monotonic() + 60,
                )
                t = _now()
                for to in res.get("to") or []:
                    sent.write(f"{res['id']} {to} {t:.3f}")
            except Exception as exc:  # the accounting shows a reply that never went
                out.write(json.dumps({"error": f"reply to {mid}: {exc!r}"}))

    def keep_seen() -> None:
        every = max(1.0, settings.stale_s / 3)
        while True:
            for sid in spec["wake"]:
                try:
                    bus.seen(sid)
                except Exception:
                    pass
            time.sleep(every)

    threading.Thread(target=replier, daemon=True).start()
    threading.Thread(target=keep_seen, daemon=True).start()
    last_full = 0.0
    try:
        while True:
            full = time.monotonic() - last_full > FULL_DRAIN_EVERY_S
            if full:
                last_full = time.monotonic()
            for sid in spec["floor"]:
                if full or _has_lines(bus, sid):
                    _drain(bus, sid, "floor", heard)
            for sid in spec["sock"]:  # what the socket could not take waits on the floor
                if _has_lines(bus, sid):
                    _drain(bus, sid, "sock-floor", heard)
            for sid in spec["wake"]:
                flag = wakes_dir / f"{sid}.wakes"
                if flag.exists() or full:
                    woken = True
                    try:
                        flag.unlink()
                    except FileNotFoundError:
                        if not full:
                            continue
                        woken = False
                    got = _drain(bus, sid, "wake", heard)
                    # A full pass ends the turn of a session it woke or drained, not of
                    # every idle one (a turn's end is a few writes a session).
                    if got is not None and (woken or got):
                        try:
                            bus.turn(sid, "end", answer="done")
                        except Exception:
                            flag.touch()  # Redis away: end the turn at the next step
            time.sleep(args.step)
    finally:
        for listener in listeners:
            listener.stop()


def _has_lines(bus: Bus, sid: str) -> bool:
    d = bus.floor.session_dir(sid)
    try:
        if os.stat(d / MESSAGES).st_size > 0:
            return True
    except FileNotFoundError:
        pass
    try:
        return any(n.startswith(DRAINING_PREFIX) for n in os.listdir(d))
    except FileNotFoundError:
        return False


def _drain(bus: Bus, sid: str, kind: str, heard: Any) -> list[dict[str, Any]] | None:
    try:
        lines = bus.drain(sid)
    except Exception:
        return None
    if isinstance(lines, list) and lines:
        heard(sid, kind, lines, _now())
    return lines if isinstance(lines, list) else []


def role_sender(args: argparse.Namespace) -> int:
    """See the module docstring; targets are ``sid=kind`` pairs, ``--froms`` the sock
    sessions of this host that reply requests come from."""
    targets = [tuple(t.split("=", 1)) for t in args.targets.split(",")]
    froms = args.froms.split(",")
    selves = [tuple(t.split("=", 1)) for t in args.selves.split(",") if t]
    settings = Settings.from_env()
    bus = Bus(settings)
    rnd = random.Random(args.index)
    gone: set[str] = set()
    waits = ThreadPoolExecutor(max_workers=2)
    base = Path(args.out).parent
    learn = _Log(base / f"learn-{args.index}.txt")
    out = _Log(Path(args.out))

    def waited(fields: dict[str, Any], t: float) -> None:
        try:
            res = bus.send(dict(fields), wait=True, timeout=args.wait_timeout)
            out.write(f"{fields['id']} {fields['to_id']} {t:.3f}")
            out.write(f"waited {fields['id']} {res.get('state')} {_now() - t:.3f}")
        except Exception as exc:
            out.write(f"waited {fields['id']} error:{type(exc).__name__} {_now() - t:.3f}")
            # Stored or not? A resend with the same id tells, and stores it at most once.
            retrying(lambda: bus.send(dict(fields)), time.monotonic() + 120)
            out.write(f"{fields['id']} {fields['to_id']} {t:.3f}")

    start = time.monotonic()
    for n in range(args.count):
        due = start + n / args.rate
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        live = [t for t in targets if t[0] not in gone] or targets
        sid, kind = live[rnd.randrange(len(live))]
        roll = rnd.random()
        prefix = "cx"
        if selves and rnd.random() < args.self_share:  # a note a session sends itself
            sid, kind = selves[rnd.randrange(len(selves))]
            prefix = "ns"
        elif kind == "wake" and roll < args.wait_share:
            prefix = "wt"
        elif kind != "wake" and roll < args.reply_share:
            prefix = "rq"
        mid = f"{prefix}-{args.index}-{n}"
        fields: dict[str, Any] = {
            "id": mid,
            "from": f"{settings.host}:sender{args.index}",
            "to_id": sid,
            "text": f"swarm {mid}",
            "class": "blocker" if kind == "wake" else "action",
        }
        others = [f for f in froms if f != sid]  # a reply needs another party
        if prefix == "rq" and others:  # a thread of its own, whose parties are the two
            fields["from_session"] = others[rnd.randrange(len(others))]
            fields["topic"] = mid
        elif prefix == "rq":
            fields["id"] = mid = f"cx-{args.index}-{n}"
        elif prefix == "ns":  # heard once like any other; nobody to reply to
            fields["from_session"] = sid
        t = _now()
        if prefix == "wt":
            waits.submit(waited, fields, t)
            continue
        answer = retrying(lambda f=fields: bus.send(dict(f)), time.monotonic() + 120)
        out.write(f"{mid} {sid} {t:.3f}")
        state = (answer.get("recipient") or {}).get("state")
        if state == "stale" and sid not in gone:
            gone.add(sid)
            learn.write(json.dumps({"sid": sid, "t": _now(), "sender": args.index}))
        if rnd.random() < args.resend:  # the same id again: stored and carried once
            retrying(lambda f=fields: bus.send(dict(f)), time.monotonic() + 120)
            out.write(f"resend {mid}")
    waits.shutdown(wait=True)
    return 0


def add_role_args(p: argparse.ArgumentParser) -> None:
    """The hidden options the children are started with."""
    hide = argparse.SUPPRESS
    p.add_argument("--role", choices=("sender", "harness"), help=hide)
    p.add_argument("--index", type=int, default=0, help=hide)
    p.add_argument("--count", type=int, default=0, help=hide)
    p.add_argument("--rate", type=float, default=1.0, help=hide)
    p.add_argument("--targets", default="", help=hide)
    p.add_argument("--froms", default="", help=hide)
    p.add_argument("--selves", default="", help=hide)
    p.add_argument("--self-share", type=float, default=0.01, help=hide)
    p.add_argument("--out", default="", help=hide)
    p.add_argument("--wakes", default="", help=hide)
    p.add_argument("--step", type=float, default=0.5, help=hide)
    p.add_argument("--wait-timeout", type=float, default=60.0, help=hide)
    p.add_argument("--wait-share", type=float, default=0.01, help=hide)
    p.add_argument("--reply-share", type=float, default=0.02, help=hide)


__all__ = ["add_role_args", "role_harness", "role_sender"]
