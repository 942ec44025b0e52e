"""The approval page and reverts, in Chromium: a created plan's result offers "Revert";
clicking it (the gateway's revert endpoint) brings the inverse's approval card
(``delete_plan``, call ``revert-c1``) as any pending call; approving it deletes the row
on the plans service, and neither result offers Revert any more (the inverse is not
reverted, nor the call twice); a tool that declares no inverse offers none; in a fork
the origin's result offers none (it ran there). Real dev
server, worker, gateway, plans service and Chromium; the model is a script."""

from __future__ import annotations

from pathlib import Path

from playwright.async_api import Page, expect

from parley.client.forks import fork
from tests.support import call, script
from tests.support.browser import page_gateway, screenshot, send, sign_in_and_start
from tests.support.plans import plans_registry, rows
from tests.support.transcripts import new_session

#: The scripted model answers by the count of assistant messages, and a revert's
#: proposal is one (Parley's own): this entry stands for it, and is the model's answer
#: only in the fork (cut before the revert).
PARLEY_PROPOSES = {"content": "(Parley proposes the inverse)"}


#: How many results offer Revert, rendered from snapshots as the gateway sends them: a
#: created plan's result the workflow names revertible, one it does not, and a snapshot
#: that does not say (nothing is offered: the page never guesses).
OFFERED_IN_PAGE = """async () => {
  const { state } = await import("/static/state.js");
  const { renderTranscript } = await import("/static/transcript.js");
  const result = { type: "tool", tool_call_id: "c9", name: "create_plan", status: "success",
    content: '{"id": 9}', artifact: { status: "success" } };
  const counts = [];
  for (const ids of [["c9"], ["c1"], undefined]) {
    const snap = { ...state.snapshot, transcript: [result], pending: [] };
    state.snapshot = { ...snap, revertible: ids };
    renderTranscript();
    counts.push(document.querySelectorAll('[data-testid="revert"]').length);
  }
  return counts;
}"""


def is_png(path: Path) -> bool:
    data = path.read_bytes()
    return data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


async def test_the_revert_button_proposes_the_inverse_for_approval(
    parley_worker, page: Page, plans, tmp_path: Path
) -> None:
    model = script(
        {"content": "", "tool_calls": [call("create_plan", "c1", title="Q4 roadmap")]},
        {"content": "Created the plan."},
        PARLEY_PROPOSES,
        {"content": "Deleted it again."},
    )
    sid = f"web-{new_session()[2:]}"
    async with page_gateway(parley_worker, plans_registry(plans), model, page) as (
        base,
        conversations,
    ):
        await sign_in_and_start(page, base, sid)
        await send(page, "plan Q4")
        await page.get_by_test_id("approval-card").get_by_test_id("approve").click()
        transcript = page.get_by_test_id("transcript")
        await expect(transcript).to_contain_text("Created the plan.")
        assert [r["title"] for r in rows(plans, "alice")] == ["Q4 roadmap"]

        revert = transcript.get_by_test_id("revert")
        await expect(revert).to_have_count(1)
        await expect(revert).to_have_attribute("data-tool-call-id", "c1")
        assert is_png(await screenshot(page, tmp_path, "revert-offered"))
        await revert.click()

        card = page.get_by_test_id("approval-card")
        await expect(card).to_have_attribute("data-tool-call-id", "revert-c1")
        await expect(card.get_by_test_id("card-title")).to_have_text("delete_plan")
        await expect(revert).to_have_count(0)  # proposed: not offered twice
        assert [r["title"] for r in rows(plans, "alice")] == ["Q4 roadmap"]  # gated
        assert is_png(await screenshot(page, tmp_path, "revert-proposed"))

        await card.get_by_test_id("approve").click()
        await expect(transcript).to_contain_text("Deleted it again.")
        await expect(page.get_by_test_id("status")).to_have_attribute("data-status", "idle")
        assert rows(plans, "alice") == []
        inverse = transcript.locator('[data-testid="tool-result"][data-tool-call-id="revert-c1"]')
        await expect(inverse).to_have_attribute("data-status", "success")
        await expect(revert).to_have_count(0)  # neither the call again nor its inverse
        assert await page.evaluate(OFFERED_IN_PAGE) == [1, 0, 0]

        # A fork cut before the revert holds c1's result, not its effect: after the
        # fork's own turn (its catalogue loaded) the page offers no Revert on it.
        forked = f"web-{new_session()[2:]}"
        await fork(conversations, sid, "alice", 4, forked)
        await conversations.send(forked, "alice", "go on in the fork")
        await page.goto("about:blank")  # a fresh load, as a link to the fork opens it
        await page.goto(f"{base}/#c={forked}")
        await expect(transcript).to_contain_text("Created the plan.")
        await expect(transcript).to_contain_text(PARLEY_PROPOSES["content"])
        await expect(page.get_by_test_id("status")).to_have_attribute("data-status", "idle")
        await expect(revert).to_have_count(0)
