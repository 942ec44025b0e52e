"""The page's inbox, in Chromium: the calls waiting on the signed-in user across
conversations (theirs and one they review), each with its conversation, age and
expiry, identical ones grouped under "Approve all 2 identical", at a desktop's and a
phone's width (screenshots, nothing wider than the phone). The button decides both
identical calls, each in its own conversation; the call whose arguments differ still
waits, and a click on it opens its conversation. Real dev server, worker, gateway and
Chromium; the model is a script."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

from playwright.async_api import Page, expect

from parley.client import Conversations
from parley.client.inbox import Inbox, read_inbox
from tests.support import ByConversation, call, registry, script
from tests.support.browser import screenshot
from tests.support.gateway import serve_gateway
from tests.support.transcripts import new_session, runs_in
from tests.support.waiting import eventually

PROPOSALS = {
    "file Q3": call("write_record", "c1", title="Q3"),
    "file Q4": call("write_record", "c1", title="Q4"),
    "file Q3 as well": call("write_record", "c1", title="Q3"),
}


def model() -> ByConversation:
    return ByConversation(
        scripts={
            text: script({"tool_calls": [proposal]}, {"content": "filed"})
            for text, proposal in PROPOSALS.items()
        }
    )


async def three_waiting(conv: Conversations, me: str, other: str) -> list[str]:
    """Q3 (mine), Q4 (mine), Q3 (``other``'s, which I review), in that order."""
    sessions = [new_session() for _ in PROPOSALS]
    owners = [(me, ()), (me, ()), (other, (me,))]
    for sid, text, (owner, reviewers) in zip(sessions, PROPOSALS, owners, strict=True):
        turn = await conv.send(sid, owner, text, reviewers=reviewers)
        assert turn.status == "awaiting_approval", turn
    return sessions


async def test_the_inbox_approves_identical_calls_at_desktop_and_phone_width(
    parley_worker, page: Page, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:6]
    me, other = f"ina-{tag}", f"cora-{tag}"
    token = f"inbox-page-token-{tag}-0123456789"
    async with (
        parley_worker(registry(), model()) as conv,
        serve_gateway(conv, {token: me}) as base,
    ):
        try:
            q3, q4, reviewed = await three_waiting(conv, me, other)

            async def indexed() -> Inbox | None:
                found = await read_inbox(conv, me)
                return found if len(found.calls) == 3 else None

            await eventually(indexed, 60, "the three calls in visibility")
            await page.goto(f"{base}/#token={token}")
            await expect(page.get_by_test_id("me")).to_have_text(f"signed in as {me}")
            inbox = page.get_by_test_id("inbox")
            rows = inbox.get_by_test_id("inbox-call")
            await expect(rows).to_have_count(3)
            order = [await r.get_attribute("data-session-id") for r in await rows.all()]
            assert order == [q3, reviewed, q4]  # grouped: the oldest call's group first
            await expect(rows.first).to_contain_text(re.compile(r"expires .*\(in \d+"))
            await expect(rows.first).to_contain_text(re.compile(r"asked (just now|\d+ min ago)"))
            await expect(inbox.locator(f'[data-session-id="{reviewed}"]')).to_contain_text(
                f"by {other}"
            )
            button = inbox.get_by_test_id("inbox-approve-group")
            await expect(button).to_have_count(1)
            await expect(button).to_have_text("Approve all 2 identical")
            await screenshot(page, tmp_path, "inbox-1280")

            await page.set_viewport_size({"width": 390, "height": 844})
            await expect(button).to_be_visible()
            box = await button.bounding_box()
            assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390
            assert await page.evaluate("document.documentElement.scrollWidth") <= 390
            await screenshot(page, tmp_path, "inbox-390")

            await button.click()
            await expect(rows).to_have_count(1, timeout=60_000)
            await expect(rows.first).to_have_attribute("data-session-id", q4)
            for sid, owner in ((q3, me), (reviewed, other)):
                state = await conv.state(sid, owner)
                assert state.status == "idle" and state.pending == []
                assert [r["title"] for r in runs_in(sid, "write_record")] == ["Q3"]
            assert len((await conv.state(q4, me)).pending) == 1
            assert runs_in(q4, "write_record") == []
            await expect(page.get_by_test_id("error")).to_be_hidden()

            await rows.first.click()
            await expect(page).to_have_url(re.compile(f"#c={re.escape(q4)}$"))
            await expect(page.get_by_test_id("approvals")).to_be_visible()
            # On a phone, the open conversation keeps the screen: the inbox is its count.
            await expect(rows.first).to_be_hidden()
            await expect(page.get_by_test_id("inbox-toggle")).to_have_text(
                re.compile(r"Waiting on you \(1\)")
            )
            await page.get_by_test_id("inbox-toggle").click()
            await expect(rows.first).to_be_visible()
            await screenshot(page, tmp_path, "inbox-390-open-conversation")

            # Decided on its card, the call leaves the inbox as the conversation's state
            # says so, whatever visibility still lists for a moment.
            card = page.get_by_test_id("approval-card")
            await card.get_by_test_id("approve").click()
            await expect(card).to_have_count(0, timeout=60_000)
            await expect(page.get_by_text("filed")).to_be_visible(timeout=60_000)
            assert (
                await page.evaluate("document.querySelectorAll('[data-testid=inbox-call]').length")
                == 0
            )
            await expect(page.get_by_test_id("inbox-toggle")).to_have_text(
                re.compile(r"Waiting on you \(0\)")
            )
        finally:
            await page.goto("about:blank")  # its event stream must not hold the gateway
