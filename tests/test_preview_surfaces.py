"""A pending call's preview on every human surface: ``parley show`` prints it under the
call and ``parley approve`` sends the hash of the one it read; the approval page's card
shows it (text only, at a desktop and a phone's width) and its button sends the hash;
the signed link's page shows it and its form sends the hash back; the webhook's body
carries it. The tool is ``create_plan`` on the reference plans service (its preview: the
row it would write, and the user's plans of the same title), so a plan of that title
created on the service meanwhile changes the preview: the approval of the old one is
refused. Real dev server, worker, gateway, plans service, webhook and Chromium; the model
is the only fake (a script)."""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

import httpx
from playwright.async_api import Page, expect
from temporalio.client import Client

from parley.client.previews import preview_text
from parley.contracts import ToolPreview
from tests.support import call, script
from tests.support.browser import page_gateway, screenshot, send, sign_in_and_start
from tests.support.cli import parley, parley_against
from tests.support.gateway import serve_gateway
from tests.support.plans import USER, create_row, fetch, history_text, plans_registry, rows
from tests.support.transcripts import new_session
from tests.support.waiting import eventually
from tests.support.webhook import Webhook

TITLE = "Q4 roadmap"
SECRET = "test-link-secret-0123456789abcdefghijklmnop"
PAGE = "http://approvals.example"


def planning_model():
    return script(
        {"content": "", "tool_calls": [call("create_plan", "c1", title=TITLE)]},
        {"content": "Created."},
    )


#: Every shape the rendering knows: nesting, a list of dicts, long text, a refusal.
SAMPLE = ToolPreview.of(
    {
        "refused": "protected",
        "branch": "feat/x",
        "commits": [{"sha": "a1b2c3", "subject": "My commit", "files": ["a"]}, "plain"],
        "diffstat": {"files_changed": 1, "files": [], "binary": True, "left": None},
        "note": "line one\nline two " + "x" * 300,
        "empty": "",
    }
)
RENDER_IN_PAGE = """async (preview) => {
  const dom = await import("/static/dom.js");
  const block = dom.previewBlock(preview);
  return {
    lines: dom.previewLines(preview).map((line) => line.text),
    block: [block.className, block.querySelector("summary").textContent],
  };
}"""


def sent_hash(history: str, preview_hash: str) -> bool:
    """Whether a decision pinned to ``preview_hash`` entered the history."""
    return f'"preview_hash":"{preview_hash}"' in history


def is_png(path: Path) -> bool:
    data = path.read_bytes()
    return data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 5_000


def test_the_readable_rendering() -> None:
    """Keys one per line, lists as bullets, long text cut, a refusal first, a failure
    said (the page's dom.js renders the same)."""
    shown = preview_text(
        ToolPreview.of(
            {
                "branch": "feat/x",
                "commits": [{"sha": "a1b2c3", "subject": "My commit"}],
                "diffstat": {"files_changed": 1},
                "note": "x" * 300,
                "refused": "not a fast-forward",
            }
        )
    )
    assert shown.splitlines()[:6] == [
        "preview: REFUSED not a fast-forward",
        "  branch: feat/x",
        "  commits:",
        "    - sha: a1b2c3, subject: My commit",
        "  diffstat:",
        "    files_changed: 1",
    ]
    assert shown.splitlines()[6] == "  note: " + "x" * 200 + "… (100 more characters)"
    assert preview_text(ToolPreview.failed("plans down")) == (
        "preview: could not be computed (plans down)"
    )


async def test_show_prints_the_preview_and_approve_is_of_what_was_read(
    parley_worker, client: Client, plans
) -> None:
    async with parley_worker(plans_registry(plans), planning_model()) as conversations:
        sid = new_session()
        turn = await conversations.send(sid, USER, "plan Q4")
        [pending] = turn.pending
        assert pending.preview is not None
        first = pending.preview.hash

        shown = await parley_against(
            conversations, client, "show", "--session", sid, "--user", USER
        )
        assert shown.returncode == 0, shown.stderr
        lines = [line.strip() for line in shown.stdout.splitlines()]
        at = lines.index("preview:")
        assert lines[at + 1 : at + 3] == ["row:", f"user_id: {USER}"]
        assert f"title: {TITLE}" in lines and "same_title: (none)" in lines

        # Someone creates a plan of that title on the service: not what was shown.
        theirs = create_row(plans, TITLE, user=USER)
        refused = await parley_against(
            conversations, client, "approve", "--session", sid, "--user", USER, "c1"
        )
        assert refused.returncode == 1 and "no longer what was shown" in refused.stderr
        assert [row["id"] for row in rows(plans, USER)] == [theirs["id"]]
        assert sent_hash(history_text(await fetch(conversations, sid)), first)

        again = await parley_against(
            conversations, client, "show", "--session", sid, "--user", USER
        )
        assert f"- id: {theirs['id']}, title: {TITLE}, status: draft" in again.stdout
        state = await conversations.state(sid, USER)
        assert state.pending[0].preview is not None and state.pending[0].preview.hash != first

        approved = await parley_against(
            conversations, client, "approve", "--session", sid, "--user", USER, "c1"
        )
        assert approved.returncode == 0, approved.stderr
        assert [row["title"] for row in rows(plans, USER)] == [TITLE, TITLE]
        history = history_text(await fetch(conversations, sid))
        assert sent_hash(history, state.pending[0].preview.hash)


async def test_chat_asks_again_with_the_new_preview(parley_worker, client: Client, plans) -> None:
    """``parley chat`` prints the preview with the call; an approval refused because it
    changed asks again, with the new one."""
    async with parley_worker(plans_registry(plans), planning_model()) as conversations:
        sid = new_session()
        await conversations.send(sid, USER, "plan Q4")
        theirs = create_row(plans, TITLE, user=USER)  # after the preview was computed
        env = {
            **os.environ,
            "TEMPORAL_ADDRESS": client.service_client.config.target_host,
            "PARLEY_TASK_QUEUE": conversations.settings.task_queue,
            "COLUMNS": "200",
        }
        chat = await asyncio.to_thread(
            parley, env, "chat", "--session", sid, "--user", USER, stdin="a\na\n/quit\n"
        )
        assert chat.returncode == 0, chat.stderr
        _, first, again = chat.stdout.split("Waiting for your decision:")
        assert "same_title: (none)" in first and "no longer what was shown" in first
        assert f"- id: {theirs['id']}, title: {TITLE}, status: draft" in again
        assert "Created." in again
        assert [row["title"] for row in rows(plans, USER)] == [TITLE, TITLE]


async def test_the_card_shows_the_preview_and_approves_what_it_showed(
    parley_worker, page: Page, plans, tmp_path: Path
) -> None:
    sid = f"web-{new_session()[2:]}"
    async with page_gateway(parley_worker, plans_registry(plans), planning_model(), page) as (
        base,
        conversations,
    ):
        await sign_in_and_start(page, base, sid)
        await send(page, "plan Q4")
        card = page.get_by_test_id("approval-card")
        preview = card.get_by_test_id("preview")
        await expect(preview).to_be_visible()
        await expect(preview).to_contain_text("Preview: what it would change")
        await expect(preview).to_contain_text(f"title: {TITLE}")
        await expect(preview).to_contain_text("same_title: (none)")
        first = await preview.get_attribute("data-preview-hash")
        assert is_png(await screenshot(page, tmp_path, "preview-card"))
        # The page's rendering is the CLI's, line for line; a refused one is marked.
        rendered = await page.evaluate(RENDER_IN_PAGE, SAMPLE.model_dump(mode="json"))
        assert rendered["lines"] == preview_text(SAMPLE).splitlines()
        assert rendered["block"] == ["preview preview-refused", "Preview: REFUSED protected"]

        await page.set_viewport_size({"width": 390, "height": 844})
        await expect(preview).to_be_visible()
        assert await page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        box = await preview.bounding_box()
        assert box is not None and box["width"] <= 390
        assert is_png(await screenshot(page, tmp_path, "preview-card-phone"))

        # A plan of that title appears on the service: the click is refused, and the card
        # shows the new preview, which the next click approves.
        theirs = create_row(plans, TITLE, user="alice")
        await card.get_by_test_id("approve").click()
        await expect(page.get_by_test_id("error")).to_contain_text("no longer what was shown")
        await expect(preview).to_contain_text(f"id: {theirs['id']}, title: {TITLE}")
        assert await preview.get_attribute("data-preview-hash") != first
        await card.get_by_test_id("approve").click()
        await expect(page.get_by_test_id("status")).to_have_attribute("data-status", "idle")
        assert [row["title"] for row in rows(plans, "alice")] == [TITLE, TITLE]
        history = history_text(await fetch(conversations, sid))
        assert sent_hash(history, str(first))


async def test_the_webhook_and_the_link_page_carry_the_preview(parley_worker, plans) -> None:
    with Webhook(200) as webhook:
        async with (
            parley_worker(
                plans_registry(plans),
                planning_model(),
                notify_url=webhook.url,
                gateway_public_url=PAGE,
                link_secret=SECRET,
            ) as conversations,
            serve_gateway(conversations) as base,
            httpx.AsyncClient(timeout=60) as http,
        ):
            sid = new_session()
            turn = await conversations.send(sid, "alice", "plan Q4")
            [pending] = turn.pending
            assert pending.preview is not None
            await eventually(lambda: webhook.requests, what="the webhook is told")
            (_, body), *_ = webhook.requests
            assert body["pending"][0]["preview"] == pending.preview.model_dump(mode="json")
            assert f"create_plan (c1) in {sid} waits for alice" in body["text"]
            assert f"Preview: {pending.preview.summary()}" in body["text"]

            [link] = [entry for entry in body["links"] if entry["user_id"] == "alice"]
            url = base + link["approve"].removeprefix(PAGE)
            page = await http.get(url)
            assert page.status_code == 200
            assert 'data-testid="preview"' in page.text and f"title: {TITLE}" in page.text
            pinned = re.search(r'name="preview_hash" value="([0-9a-f]+)"', page.text)
            assert pinned is not None and pinned.group(1) == pending.preview.hash

            used = await http.post(url, data={"preview_hash": pinned.group(1)})
            assert used.status_code == 200, used.text
            assert "You approved create_plan; it ran: success." in used.text
            assert [row["title"] for row in rows(plans, "alice")] == [TITLE]
            assert sent_hash(history_text(await fetch(conversations, sid)), pending.preview.hash)
