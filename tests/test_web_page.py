"""End to end: the approval page in a real browser: Chromium (Playwright) against the
real gateway, worker and Temporal dev server; the model is the only fake (a script).

The browser, the page, the gateway in front of the worker and the steps every page
test takes are in tests.support.browser."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

from playwright.async_api import Page, expect

from parley.contracts import Decision
from tests.support import RUNS, call, registry, runs_of, script
from tests.support.browser import (
    PROPOSE_WRITE,
    page_gateway,
    screenshot,
    send,
    sign_in_and_start,
)
from tests.support.gateway import ALICE_TOKEN


async def test_approve_a_proposed_write(parley_worker, page: Page, tmp_path: Path) -> None:
    RUNS.clear()
    sid = f"web-{uuid.uuid4().hex[:10]}"
    model = script(PROPOSE_WRITE, {"content": "Done: the Q3 record is written."})
    async with page_gateway(parley_worker, registry(), model, page) as (base, _):
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
    async with page_gateway(parley_worker, registry(), model, page) as (base, _):
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


async def test_each_card_decides_its_own_call_and_the_others_wait(
    parley_worker, page: Page, tmp_path: Path
) -> None:
    """A card's button decides its call at once; the other card keeps waiting, and the
    model goes on once every call is answered."""
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
    async with page_gateway(parley_worker, registry(), model, page) as (base, _):
        await sign_in_and_start(page, base, sid)
        await send(page, "write a and b")

        cards = page.get_by_test_id("approval-card")
        await expect(cards).to_have_count(2)
        second = page.locator('[data-testid="approval-card"][data-tool-call-id="c2"]')
        first = page.locator('[data-testid="approval-card"][data-tool-call-id="c1"]')
        await first.get_by_test_id("approve").click()

        transcript = page.get_by_test_id("transcript")
        await expect(
            transcript.locator('[data-testid="tool-result"][data-tool-call-id="c1"]')
        ).to_have_attribute("data-status", "success")
        await expect(cards).to_have_count(1)  # c2 keeps waiting
        await expect(second).to_have_count(1)
        await expect(page.get_by_test_id("status")).to_have_attribute(
            "data-status", "awaiting_approval"
        )
        await screenshot(page, tmp_path, "one-of-two-decided")
        assert [r["title"] for r in runs_of("write_record")] == ["a"]

        await second.get_by_test_id("reject-reason").fill("not b")
        await second.get_by_test_id("reject").click()

        await expect(transcript).to_contain_text("Wrote a, left b alone.")
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
    async with page_gateway(parley_worker, registry(), model, page) as (base, conversations):
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
