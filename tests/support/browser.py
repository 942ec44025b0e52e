"""The approval page's test kit (a pytest plugin, registered in tests/conftest.py):
Debian's Chromium driven by Playwright (the ``browser`` fixture, one per module, and a
fresh ``page`` per test that fails the test if the page threw), a worker with the
gateway in front of it for the page, and the steps every page test takes.

Drives /usr/bin/chromium (installed by .ci/run; or PARLEY_CHROMIUM): Playwright's own
browser download is not used. A missing browser fails, never skips. Screenshots go to
each test's tmp_path, and also to $PARLEY_SCREENSHOTS when it is set."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from langchain_core.language_models import BaseChatModel
from playwright.async_api import Browser, Page, async_playwright, expect

from parley.client import Conversations
from parley.tools import ToolRegistry
from tests.support.gateway import ALICE_TOKEN, TOKENS, serve_gateway
from tests.support.scripts import call

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
async def page_gateway(
    parley_worker, tools: ToolRegistry, model: BaseChatModel, page: Page
) -> AsyncIterator[tuple[str, Conversations]]:
    """A worker with ``tools`` and ``model`` and the gateway in front of it; yields the
    gateway's base URL and the conversations client (what the CLI uses). On the way out
    the page leaves first, so that its open event stream does not hold the gateway's
    exit."""
    async with (
        parley_worker(tools, model) as conversations,
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
