"""The approval page and the undo window, in Chromium: approving a ``create_plan`` whose
rule gives it ``undo_seconds`` shows a card "runs in N s — Undo" whose countdown ticks,
at a desktop's and a phone's width (screenshots); its Undo button takes the call back
(the gateway's undo endpoint): nothing is created on the plans service and the card
shows the call was undone, with its result as the transcript shows it (and, rendered
from snapshots, a call whose window ended shows it ran). Real dev server,
worker, gateway, plans service and Chromium; the model is a script."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.async_api import Page, expect

from parley.activities.toolsets.plans import build_plans_toolset
from parley.contracts import PolicyRule
from parley.tools import ToolRegistry
from tests.support import call, script
from tests.support.browser import page_gateway, screenshot, send, sign_in_and_start
from tests.support.plans import PLANS_KEY, rows
from tests.support.transcripts import new_session

COUNTDOWN = re.compile(r"^runs in \d+ s$")
#: The card through a call's life, rendered from snapshots as the gateway sends them: in
#: its window, past it with no result yet, and with the result that says it ran.
RAN_IN_PAGE = """async (sid) => {
  const undo = await import("/static/undo.js");
  const runsAt = new Date(Date.now() + 5000).toISOString();
  const call = { tool_call_id: "c9", name: "create_plan", runs_at: runsAt, approved_by: "alice" };
  const card = () => document.querySelector('.scheduled-card[data-tool-call-id="c9"]');
  const seen = [];
  const look = () => seen.push([card().dataset.state, card().innerText.replace(/\\s+/g, " ")]);
  undo.renderScheduled({ session_id: sid, user_id: "alice", scheduled: [call], transcript: [] });
  look();
  undo.renderScheduled({ session_id: sid, user_id: "alice", scheduled: [], transcript: [] });
  look();
  const result = { type: "tool", tool_call_id: "c9", name: "create_plan",
    content: '{"id": 7, "title": "Q4 roadmap"}', artifact: { status: "success" } };
  undo.renderScheduled({ session_id: sid, user_id: "alice", scheduled: [], transcript: [result] });
  look();
  return seen;
}"""


def undo_registry(plans) -> ToolRegistry:
    rule = PolicyRule(name="plans-undoable", tool="create_plan", decide="confirm", undo_seconds=600)
    return ToolRegistry(build_plans_toolset(plans.url, PLANS_KEY), rules=[rule])


def is_png(path: Path) -> bool:
    data = path.read_bytes()
    return data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


async def test_the_countdown_card_undoes_the_approved_call(
    parley_worker, page: Page, plans, tmp_path: Path
) -> None:
    model = script(
        {"content": "", "tool_calls": [call("create_plan", "c1", title="Q4 roadmap")]},
        {"content": "Understood, I did not create it."},
    )
    sid = f"web-{new_session()[2:]}"
    async with page_gateway(parley_worker, undo_registry(plans), model, page) as (base, _):
        await sign_in_and_start(page, base, sid)
        await send(page, "plan Q4")
        approval = page.get_by_test_id("approval-card")
        await approval.get_by_test_id("approve").click()

        card = page.get_by_test_id("scheduled-card")
        await expect(card).to_be_visible()
        await expect(approval).to_have_count(0)  # decided: no longer asks
        await expect(card).to_have_attribute("data-tool-call-id", "c1")
        await expect(card.get_by_test_id("card-title")).to_have_text("create_plan")
        countdown = card.get_by_test_id("countdown")
        await expect(countdown).to_have_text(COUNTDOWN)
        first = await countdown.text_content()
        await expect(countdown).not_to_have_text(first or "")  # it ticks
        await expect(countdown).to_have_text(COUNTDOWN)
        await expect(card.get_by_test_id("undo")).to_be_visible()
        assert is_png(await screenshot(page, tmp_path, "undo-countdown"))

        await page.set_viewport_size({"width": 390, "height": 844})
        await expect(card.get_by_test_id("undo")).to_be_visible()
        assert await page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        box = await card.bounding_box()
        assert box is not None and box["width"] <= 390
        assert is_png(await screenshot(page, tmp_path, "undo-countdown-phone"))

        await card.get_by_test_id("undo").click()
        await expect(card).to_have_attribute("data-state", "undone")
        await expect(card.get_by_test_id("undo-note")).to_contain_text("did not run")
        outcome = card.get_by_test_id("undo-outcome")
        await expect(outcome.get_by_test_id("tool-result")).to_have_attribute(
            "data-status", "rejected"
        )
        await expect(outcome).to_contain_text("undid this call")
        await expect(page.get_by_test_id("status")).to_have_attribute("data-status", "idle")
        await expect(page.get_by_test_id("transcript")).to_contain_text(
            "Understood, I did not create it."
        )
        assert rows(plans, "alice") == []
        assert is_png(await screenshot(page, tmp_path, "undo-undone-phone"))
        await card.get_by_test_id("dismiss").click()
        await expect(card).to_have_count(0)
        await expect(page.get_by_test_id("scheduled")).to_be_hidden()

        # A call whose window ends: "runs now…", then the result it ran with.
        waiting, running, ran = await page.evaluate(RAN_IN_PAGE, sid)
        assert waiting[0] == "waiting" and re.search(r"runs in [1-5] s — Undo", waiting[1])
        assert running[0] == "running" and "it runs now" in running[1]
        assert ran[0] == "ran" and "Its window ended: the call ran." in ran[1]
        assert '"title": "Q4 roadmap"' in ran[1]
