"""The web inbox in a real browser (Debian's chromium driven by Playwright), against a
real bus: Redis, a Celery worker, the scheduler and the gateway under uvicorn.

Screenshots of every page land in tests/artifacts/web/ (kept as CI artifacts).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from bus.api import Bus
from bus.core.settings import Settings
from tests.support.celery_bus import Scheduler, celery_bus, events
from tests.support.harness_support import missing
from tests.support.waiting import wait_for
from tests.support.web_support import (
    ARTIFACTS,
    CHROMIUM,
    CHROMIUM_ARGS,
    Served,
    chart_png,
    cli,
    free_port,
)
from tests.support.worker_proc import WorkerProcess

pytestmark = pytest.mark.slow

SECRET = "web-inbox-test-secret"
ITEM = "deploy:prod"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    # Skipped visibly on a person's machine without the browser (one line at the end of
    # the run says how to install it); CI, which installs it, fails without it.
    if not CHROMIUM.exists():
        missing("chromium")
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


@dataclass
class Swarm:
    settings: Settings
    bus: Bus
    served: Served
    sandbox: Path

    @property
    def base(self) -> str:
        return self.served.base

    def link(self, member: str) -> str:
        return str(cli(self.settings, "member", "link", member)["url"])

    def item_url(self, sid: str = "agent", key: str = ITEM) -> str:
        return f"{self.base}/ui/items/{sid}/{key}"


@pytest.fixture
def swarm(
    settings: Settings, start_worker: Callable[..., WorkerProcess], tmp_path: Path
) -> Iterator[Swarm]:
    """Workspace acme (members dean, luke) whose agent asked "Deploy to prod?" with a
    chart; a worker, the scheduler and the gateway running; the agent idle."""
    port = free_port()
    s = replace(settings, secret=SECRET, ui_url=f"http://127.0.0.1:{port}", wake_debounce_s=0.5)
    start_worker(s)
    scheduler = Scheduler(s)
    # The agent's own bus: its writes carry its session token.
    scopes = ["agent:inbox:read", "agent:inbox:write", "agent:thread:write"]
    own = Bus(s).issue_token(session="agent", scopes=scopes)["token"]
    b = celery_bus(replace(s, token=own))
    b.member_add("acme", "dean")
    b.member_add("acme", "luke")
    dean = Bus(s).issue_token(member="acme/dean", scopes=["agent:inbox:read"])["token"]
    b.open_session("agent", workspace="acme", starter="dean", token=dean)
    b.turn("agent", "start")
    b.item_post("agent", ITEM, title="Deploy to prod?", text="Release 1.2 passed staging.")
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    (sandbox / "chart.png").write_bytes(chart_png())
    b.reply_inbox(
        "agent", ITEM, text="Error rates after the canary:", image_paths=["chart.png"], root=sandbox
    )
    b.turn("agent", "end")  # idle, after its first turn: a member's message wakes it
    served = Served(celery_bus(s), port)
    try:
        yield Swarm(s, b, served, sandbox)
    finally:
        served.stop()
        scheduler.stop()


def sign_in(page: Any, link: str) -> None:
    """Open a sign-in link and follow the page on until the token left the address."""
    page.goto(link)
    if page.locator("#signin").count():  # the browser did not say the visitor opened it
        page.click("#signin")
    page.wait_for_url(lambda url: "/ui/login" not in url)


def click_from_another_site(page: Any, base: str, link: str) -> None:
    """Open ``link`` as a click on another site's page (a chat, a mail): a cross-site
    navigation, after which a SameSite=Strict cookie must still be sent."""
    other = base.replace("127.0.0.1", "localhost")  # another site, same server
    page.goto(f"{other}/ui/signed-out")
    page.evaluate(
        """href => { const a = document.createElement('a'); a.href = href; a.id = 'go';
             a.textContent = 'open'; document.body.appendChild(a); }""",
        link,
    )
    page.click("#go")
    # A cross-site navigation asks the visitor to confirm who signs in (login CSRF).
    page.wait_for_selector("#signin")
    page.click("#signin")
    page.wait_for_url(lambda url: url.startswith(base) and "/ui/login" not in url)


def shot(page: Any, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def natural_width(page: Any, selector: str) -> int:
    page.wait_for_function(
        "s => { const i = document.querySelector(s); return i && i.complete && i.naturalWidth > 0 }",
        arg=selector,
        timeout=10_000,
    )
    return int(page.eval_on_selector(selector, "i => i.naturalWidth"))


def the_item(s: Settings, token: str) -> dict[str, Any]:
    inbox = cli(s, "read-inbox", "agent", token=token)
    return next(i for i in inbox["items"] if i["key"] == ITEM)


def agent_token(b: Bus) -> str:
    return str(b.issue_token(session="agent", scopes=["agent:inbox:read"])["token"])


def test_a_member_answers_an_item_with_words_a_picture_and_a_settlement(
    swarm: Swarm, browser: Any
) -> None:
    from playwright.sync_api import expect

    link = swarm.link("acme/luke")
    assert link.startswith(f"{swarm.base}/ui/login?token=")
    ctx = browser.new_context()
    page = ctx.new_page()
    click_from_another_site(page, swarm.base, link)
    assert page.url == f"{swarm.base}/ui/"  # the token left the address bar
    [cookie] = [c for c in ctx.cookies() if c["name"] == "inbox_ui"]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    row = page.locator(".item-row", has_text="Deploy to prod?")
    expect(row).to_contain_text("open")
    expect(row).to_contain_text("last by agent")
    shot(page, "member-items")

    row.get_by_role("link").click()
    page.wait_for_url(swarm.item_url())
    assert natural_width(page, ".entry.agent .pictures img") == 480
    shot(page, "member-item")

    page.get_by_label("Message").fill("ship it")
    upload = swarm.sandbox / "from-luke.png"
    upload.write_bytes(chart_png(320, 160))
    page.get_by_label("Pictures").set_input_files(str(upload))
    page.get_by_role("button", name="Send").click()
    expect(page.locator(".entry.member")).to_contain_text("ship it")
    expect(page.locator(".entry.member .who")).to_contain_text("luke")
    assert natural_width(page, ".entry.member .pictures img") == 320
    # Openable at full size: the picture's own URL, typed by its bytes.
    href = page.locator(".entry.member .pictures a").get_attribute("href")
    full = page.request.get(f"{swarm.base}{href}")
    assert full.status == 200 and full.headers["content-type"] == "image/png"
    assert full.body() == upload.read_bytes()

    page.get_by_label("Answer").fill("yes")
    page.get_by_role("button", name="Settle").click()
    expect(page.locator(".answer")).to_contain_text("yes")
    # Settled: the answer is shown, no second Settle form; writing stays open.
    expect(page.get_by_role("button", name="Settle")).to_have_count(0)
    expect(page.get_by_label("Message")).to_be_visible()
    shot(page, "member-item-settled")

    item = the_item(swarm.settings, agent_token(swarm.bus))
    assert item["status"] == "settled" and item["answer"] == "yes"
    [mine] = [e for e in item["thread"] if e["from"] == "luke"]
    assert mine["text"] == "ship it" and mine["files"] == ["from-luke.png"]

    b = swarm.bus
    wait_for(lambda: events(b, "agent", "wake"), what="the wake", timeout=20)
    notices = [x for x in b.floor.peek("agent") if x.get("kind") == "notice"]
    assert len(notices) == 1 and ITEM in notices[0]["text"]
    assert len(events(b, "agent", "wake")) == 1

    # On a phone: the same page, one column, the picture scaled to the screen.
    phone = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    small = phone.new_page()
    sign_in(small, link)
    small.goto(swarm.item_url())
    width = small.eval_on_selector(
        ".entry.agent .pictures img", "i => i.getBoundingClientRect().width"
    )
    assert 0 < width <= 390
    shot(small, "member-item-phone")
    phone.close()
    ctx.close()


def test_an_agents_markdown_reply_is_shown_rendered_and_its_html_as_text(
    swarm: Swarm, browser: Any
) -> None:
    from playwright.sync_api import expect

    text = (
        "**Plan**: ship after the canary.\n\n- check `errors`\n- [runbook](https://r.example)"
        "\n\n<script>document.title='owned'</script> [x](javascript:alert(1))"
    )
    swarm.bus.reply_inbox("agent", ITEM, text=text)
    ctx = browser.new_context()
    page = ctx.new_page()
    sign_in(page, swarm.link("acme/luke"))
    page.goto(swarm.item_url())
    reply = page.locator(".entry.agent .text.md").last
    expect(reply.locator("strong")).to_have_text("Plan")
    expect(reply.locator("li")).to_have_count(2)
    expect(reply.locator("code")).to_have_text("errors")
    link = reply.get_by_role("link", name="runbook")
    assert link.get_attribute("href") == "https://r.example"
    assert "noopener" in (link.get_attribute("rel") or "")
    assert "**" not in reply.inner_text()  # no Markdown shown literally
    # The raw HTML and the script link are text on the page, never markup.
    expect(reply).to_contain_text("<script>document.title='owned'</script>")
    expect(reply).to_contain_text("[x](javascript:alert(1))")
    assert reply.locator("script").count() == 0 and page.title() != "owned"
    assert reply.get_by_role("link").count() == 1
    shot(page, "member-item-markdown")
    ctx.close()


def test_a_member_of_another_workspace_sees_none_of_it(swarm: Swarm, browser: Any) -> None:
    from playwright.sync_api import expect

    swarm.bus.member_add("globex", "eve")
    ctx = browser.new_context()
    page = ctx.new_page()
    sign_in(page, swarm.link("globex/eve"))
    expect(page.locator("h1")).to_contain_text("Items in globex")
    expect(page.locator("main")).to_contain_text("No items yet")
    assert "Deploy to prod?" not in page.content()
    shot(page, "other-member-items")

    refused = page.goto(swarm.item_url())
    assert refused is not None and refused.status == 403
    assert "Deploy to prod?" not in page.content()
    expect(page.locator("#error")).to_have_attribute("data-code", "not_your_workspace")
    shot(page, "other-member-refused")
    picture = page.request.get(f"{swarm.item_url()}/files/chart.png")
    assert picture.status == 403 and b"\x89PNG" not in picture.body()
    # Nor may eve write on it by posting with her own valid CSRF token.
    page.goto(f"{swarm.base}/ui/")
    csrf = page.locator("input[name=csrf]").first.get_attribute("value")
    posted = page.request.post(
        f"{swarm.item_url()}/settle",
        form={"csrf": csrf or "", "answer": "no"},
        headers={"Origin": swarm.base},
    )
    assert posted.status == 403
    assert the_item(swarm.settings, agent_token(swarm.bus))["status"] == "open"
    ctx.close()


def test_form_posts_without_the_csrf_token_or_from_another_origin_change_nothing(
    swarm: Swarm, browser: Any
) -> None:
    ctx = browser.new_context()
    page = ctx.new_page()
    sign_in(page, swarm.link("acme/luke"))
    page.goto(swarm.item_url())
    csrf = page.locator("form.write input[name=csrf]").get_attribute("value")
    assert csrf
    before = the_item(swarm.settings, agent_token(swarm.bus))

    attempts = [
        ("write", {"text": "no token"}, {"Origin": swarm.base}, "csrf"),
        ("settle", {"answer": "no token"}, {"Origin": swarm.base}, "csrf"),
        ("write", {"text": "wrong token", "csrf": "0" * 64}, {"Origin": swarm.base}, "csrf"),
        (
            "write",
            {"text": "elsewhere", "csrf": csrf},
            {"Origin": "http://evil.example"},
            "cross_origin",
        ),
        (
            "settle",
            {"answer": "x", "csrf": csrf},
            {"Origin": "http://evil.example"},
            "cross_origin",
        ),
        (
            "settle",
            {"answer": "x", "csrf": csrf},
            {"Referer": "http://evil.example/p"},
            "cross_origin",
        ),
    ]
    for action, form, headers, code in attempts:
        answer = page.request.post(f"{swarm.item_url()}/{action}", form=form, headers=headers)
        assert answer.status == 403, (action, form, headers)
        assert f'data-code="{code}"' in answer.text(), (action, headers)
    assert the_item(swarm.settings, agent_token(swarm.bus)) == before

    # A real cross-site page: its form posts to the inbox from another origin.
    evil = browser.new_page()
    other = f"http://localhost:{swarm.base.rsplit(':', 1)[1]}"
    evil.goto(f"{other}/ui/signed-out")
    evil.evaluate(
        """([action, csrf]) => { const f = document.createElement('form');
             f.method = 'post'; f.action = action;
             for (const [k, v] of [['answer', 'forged'], ['csrf', csrf]]) {
               const i = document.createElement('input'); i.name = k; i.value = v; f.appendChild(i); }
             document.body.appendChild(f); f.submit(); }""",
        [f"{swarm.item_url()}/settle", csrf],
    )
    evil.wait_for_load_state()
    assert the_item(swarm.settings, agent_token(swarm.bus)) == before
    ctx.close()


def test_the_operators_sessions_page_shows_a_cli_message_live(swarm: Swarm, browser: Any) -> None:
    from playwright.sync_api import expect

    b = swarm.bus
    # Each harness opens its own session; the agent's token never acts as another session.
    harness = celery_bus(swarm.settings)
    harness.open_session("lane1", handle="hosta:lane1")
    harness.open_session("watched", handle="hosta:watched")
    token = cli(swarm.settings, "token", "issue", "--operator", "root")["token"]
    ctx = browser.new_context()
    page = ctx.new_page()
    sign_in(page, f"{swarm.base}/ui/login?token={token}")
    page.wait_for_url(f"{swarm.base}/ui/sessions")
    expect(page.locator("#live")).to_have_attribute("data-live", "on", timeout=10_000)
    expect(page.locator("tr[data-session=watched]")).to_contain_text("idle")

    lane_token = b.issue_token(session="lane1", scopes=["agent:inbox:write"])["token"]
    cli(
        swarm.settings,
        "send",
        "--to-id",
        "watched",
        "--text",
        "hello from the cli",
        token=str(lane_token),
    )
    sent_at = time.monotonic()
    expect(page.locator("#feed")).to_contain_text("hello from the cli", timeout=2_000)
    assert time.monotonic() - sent_at < 2.0
    expect(page.locator("#feed")).to_contain_text("hosta:lane1 → watched")
    shot(page, "operator-sessions")

    # A session's page: its threads, typed requests, and a send form.
    page.locator("tr[data-session=watched] a").click()
    page.wait_for_url(f"{swarm.base}/ui/sessions/watched")
    wait_for(lambda: b.conversation.threads("watched"), what="the delivered thread", timeout=20)
    lane = celery_bus(swarm.settings)
    lane_thread = b.issue_token(session="lane1", scopes=["agent:thread:write"])["token"]
    lane.request("watched", "task", "Please review PR 12", token=str(lane_thread))
    wait_for(
        lambda: any(t.get("state") for t in b.conversation.threads("watched")),
        what="the typed request delivered",
        timeout=20,
    )
    page.reload()
    expect(page.locator(".items")).to_contain_text("hello from the cli")
    expect(page.locator("table.threads")).to_contain_text("REQUESTED")
    page.get_by_label("Message").fill("operator says hi <b>not bold</b>")
    page.get_by_role("button", name="Send").click()
    page.wait_for_url(f"{swarm.base}/ui/sessions/watched")
    wait_for(
        lambda: any(
            "operator says hi" in t["newestPreview"] for t in b.conversation.threads("watched")
        ),
        what="the operator's message delivered",
        timeout=20,
    )
    page.reload()
    shot(page, "operator-session")
    page.get_by_role("link", name=re.compile("operator")).first.click()
    expect(page.locator(".thread")).to_contain_text("operator says hi <b>not bold</b>")
    assert page.locator(".thread b").count() == 0  # escaped, not rendered
    shot(page, "operator-thread")
    # The agent's page lists its items; an operator reads one, pictures and all, but
    # answering is for members.
    page.goto(f"{swarm.base}/ui/sessions/agent")
    page.get_by_role("link", name=re.compile("Deploy to prod")).click()
    page.wait_for_url(swarm.item_url())
    assert natural_width(page, ".entry.agent .pictures img") == 480
    assert page.locator("form.write").count() == 0
    # A member may not open the operator pages.
    member = browser.new_context()
    mp = member.new_page()
    sign_in(mp, swarm.link("acme/dean"))
    refused = mp.goto(f"{swarm.base}/ui/sessions")
    assert refused is not None and refused.status == 403
    member.close()
    ctx.close()


def test_pages_send_the_safety_headers_and_sign_out_revokes(swarm: Swarm, browser: Any) -> None:
    ctx = browser.new_context()
    page = ctx.new_page()
    sign_in(page, swarm.link("acme/luke"))
    answer = page.goto(swarm.item_url())
    assert answer is not None
    h = answer.headers
    assert h["x-content-type-options"] == "nosniff" and h["x-frame-options"] == "DENY"
    csp = h["content-security-policy"]
    assert "script-src 'nonce-" in csp and "frame-ancestors 'none'" in csp
    assert "unsafe-inline" not in csp
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url(f"{swarm.base}/ui/signed-out")
    shot(page, "signed-out")
    assert not [c for c in ctx.cookies() if c["name"] == "inbox_ui"]
    again = page.goto(swarm.item_url())
    assert again is not None and again.status == 401
    ctx.close()
