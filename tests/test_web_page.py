"""The approval page in a real browser: Chromium (Playwright) against the real gateway,
worker and Temporal dev server; the model is the only fake (a script).

Drives Debian's Chromium (/usr/bin/chromium, installed by .ci/run; or PARLEY_CHROMIUM):
Playwright's own browser download is not used. A missing browser fails, never skips.
Screenshots go to each test's tmp_path, and also to $PARLEY_SCREENSHOTS when it is set."""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, async_playwright, expect

from parley.client import Conversations
from parley.contracts import Decision
from tests.gateway_support import ALICE_TOKEN, TOKENS, serve_gateway
from tests.support import RUNS, call, registry, runs_of, script

CHROMIUM = os.environ.get("PARLEY_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

PROPOSE_WRITE = {
    "content": "I will write the Q3 record.",
    "tool_calls": [call("write_record", "c1", title="Q3")],
}

#: Long enough for a turn on a busy machine (each step goes through Temporal).
expect.set_options(timeout=20_000)


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as p:
        launched = await p.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture
async def page(browser: Browser) -> AsyncIterator[Page]:
    context = await browser.new_context(viewport={"width": 1280, "height": 820})
    opened = await context.new_page()
    crashes: list[str] = []
    opened.on("pageerror", lambda err: crashes.append(str(err)))
    try:
        yield opened
    finally:
        await context.close()
    assert crashes == [], f"the page threw: {crashes}"


@asynccontextmanager
async def gateway(
    parley_worker, model, page: Page, sid: str
) -> AsyncIterator[tuple[str, Conversations]]:
    """A worker with ``model`` and the gateway in front of it; yields the gateway's base
    URL and the conversations client (what the CLI uses). On the way out the page
    leaves first, so that its open event stream does not hold the gateway's exit."""
    async with (
        parley_worker(registry(), model) as conversations,
        serve_gateway(conversations, TOKENS) as base,
    ):
        try:
            yield base, conversations
        finally:
            await page.goto("about:blank")


async def screenshot(page: Page, tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.png"
    await page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")
    if target := os.environ.get("PARLEY_SCREENSHOTS"):
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(target) / path.name)
    return path


async def sign_in_and_start(page: Page, base: str, sid: str) -> None:
    """Open the page with the token in the fragment, then open a new conversation."""
    await page.goto(f"{base}/#token={ALICE_TOKEN}")
    await expect(page.get_by_test_id("me")).to_have_text("signed in as alice")
    assert "token" not in page.url  # taken out of the address bar (and history)
    assert await page.evaluate("localStorage.getItem('parley.token')") == ALICE_TOKEN

    generated = await page.get_by_test_id("new-session-id").input_value()
    assert re.fullmatch(r"web-[a-z0-9]{8}", generated)
    await page.get_by_test_id("new-session-id").fill(sid)
    await page.get_by_test_id("new-conversation").click()
    await expect(page).to_have_url(re.compile(f"#c={re.escape(sid)}$"))
    await expect(page.get_by_test_id("status")).to_have_attribute("data-status", "new")


async def send(page: Page, text: str) -> None:
    await page.get_by_test_id("message-input").fill(text)
    await page.get_by_test_id("send").click()


async def test_approve_a_proposed_write(parley_worker, page: Page, tmp_path: Path) -> None:
    RUNS.clear()
    sid = f"web-{uuid.uuid4().hex[:10]}"
    model = script(PROPOSE_WRITE, {"content": "Done: the Q3 record is written."})
    async with gateway(parley_worker, model, page, sid) as (base, _):
        await sign_in_and_start(page, base, sid)
        await send(page, "please write the Q3 record")

        card = page.get_by_test_id("approval-card")
        await expect(card).to_have_count(1)
        await expect(card).to_have_attribute("data-tool-call-id", "c1")
        await expect(card).to_contain_text("write_record")
        assert json.loads(await card.get_by_test_id("args").input_value()) == {"title": "Q3"}
        await expect(page.get_by_test_id("status")).to_have_attribute(
            "data-status", "awaiting_approval"
        )
        transcript = page.get_by_test_id("transcript")
        await expect(transcript).to_contain_text("please write the Q3 record")
        await expect(transcript).to_contain_text("I will write the Q3 record.")
        listed = page.locator(f'[data-testid="conversation"][data-session-id="{sid}"]')
        await expect(listed).to_have_class(re.compile(r"\bawaiting\b"))
        await expect(page.get_by_test_id("temporal-link")).to_have_attribute(
            "href", re.compile(f"conversation-{re.escape(sid)}$")
        )
        await screenshot(page, tmp_path, "approval-card")

        # Edit with broken JSON: an error beside the arguments, and nothing is sent.
        await card.get_by_test_id("args").fill('{"title": ')
        await card.get_by_test_id("edit").click()
        await expect(card.get_by_test_id("args-error")).to_be_visible()
        await expect(card).to_have_count(1)

        # Chat text never approves: the gateway refuses it, the banner says why.
        await send(page, "yes, I confirm")
        error = page.get_by_test_id("error")
        await expect(error).to_be_visible()
        await expect(error).to_contain_text("c1")
        await error.get_by_role("button").click()
        await expect(error).to_be_hidden()
        assert runs_of("write_record") == []

        await card.get_by_test_id("approve").click()

        result = transcript.locator('[data-testid="tool-result"][data-tool-call-id="c1"]')
        await expect(result).to_have_attribute("data-status", "success")
        await expect(result).to_contain_text('"written": "Q3"')
        await expect(transcript).to_contain_text("Done: the Q3 record is written.")
        await expect(page.get_by_test_id("status")).to_have_attribute("data-status", "idle")
        await expect(card).to_have_count(0)
        await expect(page.get_by_test_id("working")).to_be_hidden()
        await expect(listed).not_to_have_class(re.compile(r"\bawaiting\b"))
        assert [(r["title"], r["user_id"]) for r in runs_of("write_record")] == [("Q3", "alice")]
        await screenshot(page, tmp_path, "approved")


async def test_reject_with_a_reason(parley_worker, page: Page, tmp_path: Path) -> None:
    RUNS.clear()
    sid = f"web-{uuid.uuid4().hex[:10]}"
    model = script(PROPOSE_WRITE, {"content": "Understood: I did not write the record."})
    async with gateway(parley_worker, model, page, sid) as (base, _):
        await sign_in_and_start(page, base, sid)
        await send(page, "please write the Q3 record")

        card = page.get_by_test_id("approval-card")
        await expect(card).to_have_count(1)
        await card.get_by_test_id("reject-reason").fill("wrong quarter")
        await card.get_by_test_id("reject").click()

        transcript = page.get_by_test_id("transcript")
        await expect(transcript).to_contain_text("Understood: I did not write the record.")
        result = transcript.locator('[data-testid="tool-result"][data-tool-call-id="c1"]')
        await expect(result).to_have_attribute("data-status", "rejected")
        await expect(result).to_contain_text("wrong quarter")
        await expect(page.get_by_test_id("status")).to_have_attribute("data-status", "idle")
        await expect(card).to_have_count(0)
        assert runs_of("write_record") == []  # the tool never ran
        await screenshot(page, tmp_path, "rejected")


async def test_several_pending_calls_are_decided_together(
    parley_worker, page: Page, tmp_path: Path
) -> None:
    """Each card records its choice; one request goes when every card has one."""
    RUNS.clear()
    sid = f"web-{uuid.uuid4().hex[:10]}"
    model = script(
        {
            "content": "Two writes.",
            "tool_calls": [
                call("write_record", "c1", title="a"),
                call("write_record", "c2", title="b"),
            ],
        },
        {"content": "Wrote a, left b alone."},
    )
    async with gateway(parley_worker, model, page, sid) as (base, _):
        await sign_in_and_start(page, base, sid)
        await send(page, "write a and b")

        cards = page.get_by_test_id("approval-card")
        await expect(cards).to_have_count(2)
        first = page.locator('[data-testid="approval-card"][data-tool-call-id="c1"]')
        second = page.locator('[data-testid="approval-card"][data-tool-call-id="c2"]')
        await first.get_by_test_id("approve").click()
        await expect(first).to_contain_text("will approve")
        await expect(first.get_by_test_id("approve")).to_be_disabled()
        await screenshot(page, tmp_path, "one-of-two-chosen")
        assert runs_of("write_record") == []  # nothing is sent before every card has a choice
        await expect(page.get_by_test_id("status")).to_have_attribute(
            "data-status", "awaiting_approval"
        )

        await second.get_by_test_id("reject-reason").fill("not b")
        await second.get_by_test_id("reject").click()

        transcript = page.get_by_test_id("transcript")
        await expect(transcript).to_contain_text("Wrote a, left b alone.")
        await expect(
            transcript.locator('[data-testid="tool-result"][data-tool-call-id="c1"]')
        ).to_have_attribute("data-status", "success")
        await expect(
            transcript.locator('[data-testid="tool-result"][data-tool-call-id="c2"]')
        ).to_have_attribute("data-status", "rejected")
        await expect(cards).to_have_count(0)
        assert [r["title"] for r in runs_of("write_record")] == ["a"]


async def test_a_decision_made_elsewhere_shows_up_live(
    parley_worker, page: Page, tmp_path: Path
) -> None:
    """Opened from ``#c=<id>``, the page follows the event stream: a decision made by the
    CLI (another client) clears the card and brings the reply without a reload."""
    RUNS.clear()
    sid = f"web-{uuid.uuid4().hex[:10]}"
    model = script(PROPOSE_WRITE, {"content": "Written, as the CLI approved."})
    async with gateway(parley_worker, model, page, sid) as (base, conversations):
        turn = await conversations.send(sid, "alice", "please write the Q3 record")
        assert turn.status == "awaiting_approval"

        await page.goto(f"{base}/#token={ALICE_TOKEN}&c={sid}")
        await expect(page).to_have_url(re.compile(f"/#c={re.escape(sid)}$"))
        card = page.get_by_test_id("approval-card")
        await expect(card).to_have_count(1)
        await expect(page.locator("#live.on")).to_have_count(1)  # the stream is connected

        await conversations.decide(sid, "alice", [Decision(tool_call_id="c1", action="approve")])

        await expect(page.get_by_test_id("transcript")).to_contain_text(
            "Written, as the CLI approved."
        )
        await expect(card).to_have_count(0)
        await expect(page.get_by_test_id("status")).to_have_attribute("data-status", "idle")
        await screenshot(page, tmp_path, "decided-elsewhere")
