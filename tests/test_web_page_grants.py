"""The approval page and remembered decisions (grants), in Chromium: "Approve and
remember" for 1 hour on a card gives a grant that the conversation view's "Remembered
decisions" lists (tool, arguments, approve, by whom, since and until when, what it was
given for), at a desktop's and a phone's width (screenshots); the next identical call
runs without asking; Revoke (the gateway's DELETE route) says "revoked" only when the
route answers so, and the next identical call waits again. A grant whose lifetime the
policy file cut short shows its real end, and the call asked again says why on its card;
the person a call was escalated to, and anyone on a call a reviewer rule holds, is
offered no remember (the gate refuses it). Real
dev server, worker, gateway and Chromium; the model is a script."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from langchain_core.tools import StructuredTool
from playwright.async_api import Page, expect

from parley.client.grants import list_grants
from parley.config.settings import Settings
from parley.tools import ParleyTool, ToolRegistry, confirm, load_registry
from tests.support import call, script
from tests.support.browser import page_gateway, screenshot, send, sign_in_and_start
from tests.support.transcripts import new_session, tool_messages
from tests.support.waiting import eventually

WHEN = re.compile(r"since (\S+ \S+) UTC, until (\S+ \S+) UTC")

#: A card for a call escalated to carol, rendered from the snapshot she reads (her calls,
#: no transcript), and the same card for the owner: only the owner's offers remember, and
#: not on a call a reviewer rule holds (the gate refuses remember there).
OFFERED_IN_PAGE = """async () => {
  const { state } = await import("/static/state.js");
  const { buildCard } = await import("/static/approvals.js");
  const p = { tool_call_id: "c9", name: "stamp", args: { text: "y" }, args_hash: "h",
    expires_at: new Date(Date.now() + 600000).toISOString() };
  const view = { tool_call_id: "c9", may_approve: true, may_decide: true, text: "" };
  const saved = [state.snapshot, state.userId];
  const offered = [];
  const held = { ...p, reviewer_rule: "two-for-main" };
  for (const [user, total, call] of [["carol", 0, p], ["alice", 4, p], ["alice", 4, held]]) {
    state.userId = user;
    state.snapshot = { user_id: "alice", pending: [call], transcript: [], transcript_total: total };
    offered.push(buildCard(call, view).querySelectorAll('[data-testid="approve-remember"]').length);
  }
  [state.snapshot, state.userId] = saved;
  return offered;
}"""

#: A grant the page shows that the conversation does not have: its Revoke is refused.
STALE_GRANT_IN_PAGE = """async () => {
  const { state } = await import("/static/state.js");
  const { renderGrants } = await import("/static/grants.js");
  const stale = { shape: 'stamp {"text":"x"}', policy: "auto", decided_by: "alice",
    tool_call_id: "c9", tool: "stamp", granted_at: new Date().toISOString() };
  renderGrants({ ...state.snapshot, remembered: [stale] });
}"""


def stamp_tool() -> ParleyTool:
    def stamp(text: str) -> str:
        return f"stamped {text}"

    return confirm(StructuredTool.from_function(func=stamp, name="stamp", description="Stamp."))


def rounds(n: int) -> list[dict[str, object]]:
    """``n`` turns, each proposing ``stamp(text="x")`` (ids c1..cn), then replying."""
    entries: list[dict[str, object]] = []
    for i in range(1, n + 1):
        tool_calls = [call("stamp", f"c{i}", text="x")]
        entries += [{"content": "", "tool_calls": tool_calls}, {"content": f"done {i}"}]
    return entries


def is_png(path: Path) -> bool:
    data = path.read_bytes()
    return data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def span(text: str) -> timedelta:
    """How long a grant lasts, read from its row's "since …, until …"."""
    found = WHEN.search(text)
    assert found, text
    since, until = (datetime.strptime(t, "%Y-%m-%d %H:%M:%S") for t in found.groups())
    return until - since


async def remember_from_card(page: Page, call_id: str, lifetime: str) -> None:
    card = page.locator(f'[data-testid="approval-card"][data-tool-call-id="{call_id}"]')
    await expect(card).to_be_visible()
    await card.get_by_test_id("remember-for").select_option(lifetime)
    await card.get_by_test_id("approve-remember").click()
    await expect(card).to_have_count(0)


async def test_a_grant_given_on_the_page_is_listed_used_and_revoked(
    parley_worker, page: Page, tmp_path: Path
) -> None:
    sid = f"web-{new_session()[2:]}"
    tools = ToolRegistry([stamp_tool()])
    async with page_gateway(parley_worker, tools, script(*rounds(3)), page) as (base, conv):
        await sign_in_and_start(page, base, sid)
        await send(page, "one")
        await expect(page.get_by_test_id("approve-remember")).to_be_visible()
        assert is_png(await screenshot(page, tmp_path, "grants-card"))
        await remember_from_card(page, "c1", "3600")
        transcript = page.get_by_test_id("transcript")
        await expect(transcript).to_contain_text("done 1")

        grants = page.get_by_test_id("grants")
        await expect(grants).to_be_visible()
        await expect(grants).to_contain_text("Remembered decisions (1)")
        row = grants.get_by_test_id("grant")
        await expect(row).to_have_attribute("data-grant-id", "c1")
        await expect(row.get_by_test_id("grant-policy")).to_have_text("approve")
        await expect(row.get_by_test_id("grant-tool")).to_have_text("stamp")
        await expect(row.get_by_test_id("grant-args")).to_have_text('{"text":"x"}')
        when = row.get_by_test_id("grant-when")
        await expect(when).to_contain_text("by alice, since ")
        assert span(await when.inner_text()) == timedelta(hours=1)
        (grant,) = await list_grants(conv, sid, "alice")
        assert grant.policy_version and grant.expires_at and grant.granted_at
        assert grant.expires_at - grant.granted_at == timedelta(hours=1)
        await expect(row.get_by_test_id("grant-for")).to_have_text(
            f"given for a built-in tool, policy {grant.policy_version[:8]}, "
            f"tool {(grant.spec_hash or '')[:8]}"
        )
        assert is_png(await screenshot(page, tmp_path, "grants-listed"))

        await page.set_viewport_size({"width": 390, "height": 844})
        await expect(row.get_by_test_id("revoke")).to_be_visible()
        assert await page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        box = await row.bounding_box()
        assert box is not None and box["width"] <= 390
        assert is_png(await screenshot(page, tmp_path, "grants-listed-phone"))

        # The next identical call runs without asking.
        await send(page, "two")
        await expect(transcript).to_contain_text("done 2")
        result = transcript.locator('[data-testid="tool-result"][data-tool-call-id="c2"]')
        await expect(result).to_have_attribute("data-status", "success")
        await expect(page.get_by_test_id("approval-card")).to_have_count(0)
        audit = (await conv.state(sid, "alice")).audit
        decided = [e for e in audit if e.tool_call_id == "c2" and e.event == "decided"]
        assert [(e.channel, e.detail["remembered_from"]) for e in decided] == [("remembered", "c1")]

        await row.get_by_test_id("revoke").click()
        await expect(row).to_have_attribute("data-state", "revoked")
        await expect(row.get_by_test_id("grant-note")).to_have_text(
            "revoked: the next identical call waits for a decision"
        )
        await expect(row.get_by_test_id("revoke")).to_be_hidden()
        assert await list_grants(conv, sid, "alice") == []
        audit = (await conv.state(sid, "alice")).audit
        assert [e.actor for e in audit if e.event == "grant_revoked"] == ["alice"]
        assert is_png(await screenshot(page, tmp_path, "grants-revoked-phone"))

        # The next identical call waits for a decision again.
        await send(page, "three")
        card = page.locator('[data-testid="approval-card"][data-tool-call-id="c3"]')
        await expect(card).to_be_visible()
        answered = tool_messages((await conv.state(sid, "alice")).transcript, pending=("c3",))
        assert sorted(answered) == ["c1", "c2"]

        # A Revoke the route refuses says so, and never "revoked".
        await page.evaluate(STALE_GRANT_IN_PAGE)
        stale = grants.locator('[data-grant-id="c9"]')
        await stale.get_by_test_id("revoke").click()
        await expect(page.get_by_test_id("error")).to_contain_text("no remembered decision 'c9'")
        await expect(stale).to_have_count(0)  # the snapshot read again does not have it
        await expect(grants.locator('[data-state="revoked"]')).to_have_count(1)  # c1's only


async def test_a_lapsed_grant_asks_again_on_the_card_saying_why(
    parley_worker, page: Page, tmp_path: Path
) -> None:
    sid = f"web-{new_session()[2:]}"
    policies = tmp_path / f"policies-{uuid.uuid4().hex[:6]}.toml"
    policies.write_text("[grants]\nmax_remember_seconds = 2\n")
    tools = load_registry("", [stamp_tool()], settings=Settings(policies_file=str(policies)))
    async with page_gateway(parley_worker, tools, script(*rounds(2)), page) as (base, conv):
        await sign_in_and_start(page, base, sid)
        assert await page.evaluate(OFFERED_IN_PAGE) == [0, 1, 0]
        await send(page, "one")
        await remember_from_card(page, "c1", "86400")
        row = page.get_by_test_id("grant")
        await expect(row).to_have_attribute("data-grant-id", "c1")
        # Asked for a day, the policy file's maximum cut it to 2 s: the row says so.
        assert span(await row.get_by_test_id("grant-when").inner_text()) == timedelta(seconds=2)
        (grant,) = await list_grants(conv, sid, "alice")
        ends = grant.expires_at
        assert ends is not None
        await eventually(lambda: datetime.now(UTC) > ends, what="the grant to end")

        await send(page, "two")
        card = page.locator('[data-testid="approval-card"][data-tool-call-id="c2"]')
        said = card.get_by_test_id("asked-again")
        await expect(said).to_have_text(
            re.compile(r"^asked again: the remembered approval of .* ended at ")
        )
        assert f"ended at {ends:%Y-%m-%d %H:%M:%S} UTC" in await said.inner_text()
        await expect(page.get_by_test_id("grants")).to_be_hidden()  # lapsed: forgotten
        assert is_png(await screenshot(page, tmp_path, "grant-asked-again"))
        await page.set_viewport_size({"width": 390, "height": 844})
        await expect(said).to_be_visible()
        assert await page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        assert is_png(await screenshot(page, tmp_path, "grant-asked-again-phone"))
