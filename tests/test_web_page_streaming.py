"""End to end: the page renders the reply as it streams, in Debian's Chromium
(tests.support.browser) against the real gateway and worker.

What must hold: the reply's text grows on the page while the provider (the OpenAI
protocol, tests.support.openai_fake) still writes, and ends as the one stored reply; a
model call that fails mid-stream and is retried leaves no trace of its partial text:
at no moment are two streaming replies on the page.
"""

from __future__ import annotations

import time
from pathlib import Path

from playwright.async_api import Page, expect

from tests.support import registry
from tests.support.browser import page_gateway, screenshot, send, sign_in_and_start
from tests.support.openai_env import THIRTY_WORDS, openai_model
from tests.support.openai_fake import FakeOpenAI
from tests.support.streaming_models import FailsMidStream
from tests.support.transcripts import new_session

#: Counts, in the page, the most streaming replies ever shown at once (a
#: MutationObserver sees every state the transcript passes through).
WATCH_STREAMING = """() => {
  window.maxStreaming = 0;
  const box = document.getElementById("transcript");
  new MutationObserver(() => {
    const now = box.querySelectorAll(".msg.ai.streaming").length;
    window.maxStreaming = Math.max(window.maxStreaming, now);
  }).observe(box, { childList: true, subtree: true });
}"""


async def test_the_reply_grows_on_the_page_while_the_provider_writes(
    parley_worker, page: Page, fake: FakeOpenAI, tmp_path: Path
) -> None:
    fake.reply(THIRTY_WORDS, chunk_delay=0.1)
    sid = new_session()
    async with page_gateway(parley_worker, registry(), openai_model(), page) as (base, _):
        await sign_in_and_start(page, base, sid)
        await send(page, "talk to me")
        streaming = page.locator(".msg.ai.streaming .text")
        await expect(streaming).to_contain_text("word3")
        partial_at = time.monotonic()
        partial = await streaming.inner_text()
        await screenshot(page, tmp_path, "streaming-partial")

        await expect(page.get_by_test_id("status")).to_have_attribute("data-status", "idle")
        replies = page.locator(".msg.ai .text")
        await expect(replies).to_have_text([THIRTY_WORDS])
        await expect(page.locator(".msg.ai.streaming")).to_have_count(0)

    (provider,) = fake.streams
    assert partial_at < provider.delta_times[-1], "the text showed only once it was all written"
    assert THIRTY_WORDS.startswith(partial) and len(partial) < len(THIRTY_WORDS), partial


async def test_a_retried_model_calls_partial_text_leaves_the_page(
    parley_worker, page: Page, tmp_path: Path
) -> None:
    model = FailsMidStream(text=THIRTY_WORDS, words_then_fail=12)
    sid = new_session()
    async with page_gateway(parley_worker, registry(), model, page) as (base, _):
        await sign_in_and_start(page, base, sid)
        await page.evaluate(WATCH_STREAMING)
        await send(page, "talk to me")
        await expect(page.locator(".msg.ai.streaming .text")).to_contain_text("word5")
        await expect(page.get_by_test_id("status")).to_have_attribute("data-status", "idle")
        await expect(page.locator(".msg.ai .text")).to_have_text([THIRTY_WORDS])
        await screenshot(page, tmp_path, "streaming-retried")
        most_at_once = await page.evaluate("window.maxStreaming")

    assert model.calls == [1, 2]
    assert most_at_once == 1, "the discarded attempt's text stayed beside the retry's"
