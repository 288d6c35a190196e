"""Items for members, with pictures, against real Redis and real files."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from bus.api import Bus
from bus.core.errors import BadInput, BusError, NotFound, Refused
from bus.core.item_views import FORMER_MEMBER
from bus.core.policy import from_member
from tests.support.pictures import png_bytes

WS = "acme"


@pytest.fixture
def agent(bus: Bus) -> Bus:
    """Session "agent" started by member dean of workspace acme, with one item posted."""
    bus.items.member_add(WS, "dean")
    bus.items.member_add(WS, "luke")
    bus.open_session("agent", workspace=WS, starter="dean")
    bus.items.item_post("agent", "deploy:prod", title="May I deploy?", text="Release 1.2 is ready.")
    return bus


@pytest.fixture
def sandbox(tmp_path: Path) -> Path:
    root = tmp_path / "sandbox"
    root.mkdir()
    (root / "shot.png").write_bytes(png_bytes())
    return root


def files_on_disk(b: Bus) -> list[str]:
    base = Path(b.settings.home) / "items"
    return sorted(str(p) for p in base.rglob("*") if p.is_file()) if base.exists() else []


def item_of(b: Bus, key: str = "deploy:prod") -> dict:
    return next(i for i in b.items.read_inbox("agent")["items"] if i["key"] == key)


def test_members(bus: Bus) -> None:
    assert not bus.items.is_member(WS, "dean")
    bus.items.member_add(WS, "dean")
    assert bus.items.is_member(WS, "dean")
    assert bus.items.member_remove(WS, "dean")["status"] == "removed"
    assert not bus.items.is_member(WS, "dean")
    with pytest.raises(NotFound):
        bus.items.member_remove(WS, "nobody")
    for bad in ("has space", "", "a/b", ".."):
        with pytest.raises(BadInput):
            bus.items.member_add(WS, bad)
        with pytest.raises(BadInput):
            bus.items.member_add(bad, "dean")


def test_thread_in_order_with_names_and_files(agent: Bus, sandbox: Path) -> None:
    b = agent
    b.items.item_write(
        "agent",
        "deploy:prod",
        member="luke",
        text="Here is the graph",
        image_paths=["shot.png"],
        root=sandbox,
    )
    b.items.reply_inbox("agent", "deploy:prod", text="Thanks, **deploying** now.", root=sandbox)
    item = item_of(b)
    assert item["thread"] == [
        {"from": "luke", "text": "Here is the graph", "files": ["shot.png"]},
        {"from": "you", "text": "Thanks, **deploying** now."},
    ]
    assert set(item) == {
        "key",
        "title",
        "status",
        "answer",
        "revision",
        "settledAt",
        "updatedAt",
        "thread",
    }
    # Luke's account goes: his message stays, under "a former member".
    b.items.member_remove(WS, "luke")
    assert item_of(b)["thread"][0]["from"] == FORMER_MEMBER


def test_reply_with_picture_kept_and_served(agent: Bus, sandbox: Path) -> None:
    b = agent
    b.items.item_settle("agent", "deploy:prod", member="dean", answer="Yes, go ahead.")
    before = item_of(b)
    assert before["status"] == "settled" and before["answer"] == "Yes, go ahead."
    out = b.items.reply_inbox(
        "agent",
        "deploy:prod",
        text="Done: see the graph.",
        image_paths=["shot.png"],
        root=sandbox,
    )
    assert out["ok"] and out["files"] == ["shot.png"] and out["key"] == "deploy:prod"
    after = item_of(b)
    for field in ("status", "answer", "revision", "settledAt", "title"):
        assert after[field] == before[field]
    assert after["updatedAt"] > before["updatedAt"] == before["settledAt"]
    assert out["updatedAt"] == after["updatedAt"]
    assert after["thread"] == [
        {"from": "you", "text": "Done: see the graph.", "files": ["shot.png"]}
    ]
    path = b.items.item_file("agent", "deploy:prod", "shot.png")
    assert path.read_bytes() == (sandbox / "shot.png").read_bytes()
    assert path.parent == Path(b.settings.home) / "items" / "agent" / "deploy:prod" / "files"
    # Pictures alone are a reply too, and an absolute path inside the root is fine.
    out2 = b.items.reply_inbox(
        "agent", "deploy:prod", image_paths=[str(sandbox / "shot.png")], root=sandbox
    )
    assert out2["files"] == ["shot.png"]  # same bytes, same name: kept once
    with pytest.raises(NotFound):
        b.items.item_file("agent", "deploy:prod", "other.png")
    with pytest.raises(BadInput):
        b.items.item_file("agent", "deploy:prod", "../shot.png")


def test_refused_replies_write_nothing(agent: Bus, sandbox: Path, tmp_path: Path) -> None:
    b = agent
    b.open_session("other", workspace=WS, starter="dean")
    b.items.item_post("other", "theirs", title="Another agent's item")
    (sandbox / "notes.png").write_text("just text, named like a picture\n")
    outside = tmp_path / "outside.png"
    outside.write_bytes(png_bytes())
    (sandbox / "escape.png").symlink_to(outside)
    (sandbox / "big.png").write_bytes(png_bytes() + b"\0" * (5 * 1024 * 1024))

    state = b.items.read_inbox("agent")
    disk = files_on_disk(b)
    cases: list[tuple[type[BusError], str | None, dict]] = [
        (NotFound, "unknown_item", {"key": "theirs", "text": "hi"}),
        (NotFound, "unknown_item", {"key": "nope", "text": "hi"}),
        (BadInput, None, {"key": "../etc", "text": "hi"}),
        (BadInput, "empty_reply", {"key": "deploy:prod", "text": "   "}),
        (BadInput, "empty_reply", {"key": "deploy:prod"}),
        (BadInput, "text_too_long", {"key": "deploy:prod", "text": "x" * 8001}),
        (
            BadInput,
            "not_a_picture",
            {"key": "deploy:prod", "text": "hi", "image_paths": ["shot.png", "notes.png"]},
        ),
        (
            BadInput,
            "picture_outside_root",
            {"key": "deploy:prod", "text": "hi", "image_paths": [str(outside)]},
        ),
        (
            BadInput,
            "picture_outside_root",
            {"key": "deploy:prod", "text": "hi", "image_paths": ["../outside.png"]},
        ),
        (
            BadInput,
            "picture_outside_root",
            {"key": "deploy:prod", "text": "hi", "image_paths": ["escape.png"]},
        ),
        (BadInput, "picture_too_large", {"key": "deploy:prod", "image_paths": ["big.png"]}),
        (BadInput, "too_many_pictures", {"key": "deploy:prod", "image_paths": ["shot.png"] * 5}),
        (BadInput, "picture_not_found", {"key": "deploy:prod", "image_paths": ["missing.png"]}),
    ]
    for exc, code, kw in cases:
        key = kw.pop("key")
        with pytest.raises(exc) as err:
            b.items.reply_inbox("agent", key, root=sandbox, **kw)
        if code:
            assert err.value.code == code, (code, err.value)
        assert b.items.read_inbox("agent") == state, code
        assert files_on_disk(b) == disk, code

    # The starter's account goes: the agent may no longer reply (nor post).
    b.items.member_remove(WS, "dean")
    with pytest.raises(Refused) as err:
        b.items.reply_inbox(
            "agent", "deploy:prod", text="hi", image_paths=["shot.png"], root=sandbox
        )
    assert err.value.code == "starter_not_member"
    with pytest.raises(Refused):
        b.items.item_post("agent", "deploy:prod", title="again")
    assert b.items.read_inbox("agent") == state
    assert files_on_disk(b) == disk


def test_repost_bumps_revision_and_reopens(agent: Bus) -> None:
    b = agent
    b.items.item_settle("agent", "deploy:prod", member="luke", answer="No, wait for QA.")
    b.items.item_write("agent", "deploy:prod", member="luke", text="QA is on it")
    first = item_of(b)
    assert first["revision"] == 1 and first["status"] == "settled"
    time.sleep(0.002)
    out = b.items.item_post("agent", "deploy:prod", title="May I deploy 1.2.1?")["item"]
    assert out["revision"] == 2 and out["title"] == "May I deploy 1.2.1?"
    again = item_of(b)
    assert again["status"] == "open" and again["answer"] is None and again["settledAt"] is None
    assert again["updatedAt"] > first["updatedAt"]
    # The thread carries on across revisions.
    assert again["thread"] == first["thread"]
    with pytest.raises(BadInput):
        b.items.item_post("agent", "bad key", title="x")
    with pytest.raises(BadInput):
        b.items.item_post("agent", "k" * 201, title="x")
    with pytest.raises(BadInput):
        b.items.item_post("agent", "ok", title="")


def test_settled_item_takes_messages_and_replies(agent: Bus) -> None:
    b = agent
    b.items.item_settle("agent", "deploy:prod", member="dean", answer="Yes")
    b.items.item_write("agent", "deploy:prod", member="dean", text="One more thing")
    b.items.reply_inbox("agent", "deploy:prod", text="Noted")
    item = item_of(b)
    assert item["status"] == "settled" and item["answer"] == "Yes"
    assert [e["from"] for e in item["thread"]] == ["dean", "you"]


def test_only_members_settle_and_write(agent: Bus) -> None:
    b = agent
    with pytest.raises(Refused) as err:
        b.items.item_settle("agent", "deploy:prod", member="mallory", answer="yes")
    assert err.value.code == "not_a_member"
    with pytest.raises(Refused):
        b.items.item_write("agent", "deploy:prod", member="mallory", text="hi")
    with pytest.raises(NotFound):
        b.items.item_write("agent", "nope", member="dean", text="hi")
    with pytest.raises(BadInput):
        b.items.item_write("agent", "deploy:prod", member="dean", text=" ")
    assert item_of(b)["thread"] == [] and item_of(b)["status"] == "open"


def test_session_without_workspace_cannot_post(bus: Bus) -> None:
    bus.open_session("loner")
    with pytest.raises(Refused) as err:
        bus.items.item_post("loner", "k", title="t")
    assert err.value.code == "no_workspace"
    assert bus.items.read_inbox("loner") == {"items": []}


def test_member_message_reaches_the_agent(agent: Bus, sandbox: Path) -> None:
    b = agent
    out = b.items.item_write(
        "agent",
        "deploy:prod",
        member="luke",
        text="Can you check the logs?",
        image_paths=["shot.png"],
        root=sandbox,
    )
    b.deliver_session("agent")
    rows = b.threads("agent")["threads"]
    row = next(t for t in rows if t["threadId"] == out["thread"])
    assert "deploy:prod" in row["newestPreview"]
    assert row["newestPreview"].startswith("Inbox message on deploy:prod")
    assert row["label"] == "item deploy:prod"  # the item's key, not the thread's id
    assert b.read("agent", out["thread"])["label"] == "item deploy:prod"
    msgs = b.read("agent", out["thread"])["messages"]
    assert msgs[-1]["kind"] == "item" and msgs[-1]["from"] == "acme:luke"
    assert msgs[-1]["files"][0]["name"] == "shot.png"
    info = b.session("agent")
    assert from_member(info, {"kind": "item", "from": "acme:luke"}, b.store.members.member_status)
    assert not from_member(
        info, {"kind": "item", "from": "acme:mallory"}, b.store.members.member_status
    )
    assert not from_member(
        info, {"kind": "item", "from": "other:luke"}, b.store.members.member_status
    )
    assert not from_member(
        info, {"kind": "message", "from": "acme:luke"}, b.store.members.member_status
    )


def test_no_file_written_outside_home(agent: Bus, sandbox: Path) -> None:
    b = agent
    b.items.reply_inbox("agent", "deploy:prod", text="pic", image_paths=["shot.png"], root=sandbox)
    stored = b.items.item_file("agent", "deploy:prod", "shot.png")
    assert stat_mode(stored) == 0o600
    assert stat_mode(stored.parent) == 0o700


def stat_mode(p: Path) -> int:
    return os.stat(p).st_mode & 0o777


def test_a_members_message_wakes_an_idle_agent(agent: Bus) -> None:
    from bus.delivery.scheduler import tick

    b = agent
    b.turn("agent", "start")
    b.turn("agent", "end")  # had its first turn: only what deserves it wakes it now
    b.items.item_write("agent", "deploy:prod", member="luke", text="Please look again")
    b.deliver_session("agent")
    time.sleep(b.settings.wake_debounce_s)
    tick(b.delivery, sweep=False)
    b.deliver_session("agent")
    wakes = [f for _e, f in b.store.r.xrange(b.store.k.s("agent", "events")) if f["kind"] == "wake"]
    assert len(wakes) == 1
    [notice] = [x for x in b.floor.peek("agent") if x.get("kind") == "notice"]
    assert "deploy:prod" in notice["text"]
