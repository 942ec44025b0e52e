"""A judge's verdict on every surface: the approval page's card says it ("escalated by
judge: ..."), in the CLI's words; the webhook tells the rule's ``escalate_to`` with the
verdict in its text and the call; the AG-UI interrupt carries it; ``parley tools``
lists the judge of each rule. Real dev server, worker, gateway, webhook and Chromium;
the agent's model and the judge are scripted (``tests.support.judges``)."""

from __future__ import annotations

from pathlib import Path

from playwright.async_api import Page, expect
from typer.testing import CliRunner

from parley.cli import app
from parley.contracts.judging import JudgeVerdict
from tests.support.browser import page_gateway, screenshot, send, sign_in_and_start
from tests.support.cli import NOWHERE
from tests.support.scripts import call, script
from tests.support.transcripts import new_session
from tests.support.waiting import eventually
from tests.support.webhook import Webhook
from tests.test_judge import CAREFUL, judged_rule, registry

ESCALATED = "escalated by judge: unknown target 'analytics'"
LABEL_IN_PAGE = """async (verdicts) => {
  const dom = await import("/static/dom.js");
  return verdicts.map((v) => dom.judgedText(v));
}"""


def analytics_model():
    query = call("run_query", "q1", target="analytics", sql="select 1")
    return script({"content": "", "tool_calls": [query]}, {"content": "Done."})


async def test_the_card_shows_the_judges_verdict_in_the_clis_words(
    parley_worker, page: Page, tmp_path: Path
) -> None:
    sid = f"web-{new_session()[2:]}"
    rules = registry(judged_rule(escalate_to="priya"))
    async with page_gateway(parley_worker, rules, analytics_model(), page) as (
        base,
        conversations,
    ):
        await sign_in_and_start(page, base, sid)
        await send(page, "count the rows on analytics")
        card = page.get_by_test_id("approval-card")
        await expect(card.get_by_test_id("judged")).to_have_text(ESCALATED)
        await screenshot(page, tmp_path, "judged-card")
        verdicts = [
            JudgeVerdict(verdict=v, reason="r", model=CAREFUL, args_hash="h", **extra)
            for v, extra in [
                ("approve", {}),
                ("deny", {}),
                ("escalate", {"outcome": "waits"}),
                ("escalate", {"failed": True}),
                ("approve", {"outcome": "opinion"}),
                ("approve", {"outcome": "stale"}),
            ]
        ]
        shown = await page.evaluate(LABEL_IN_PAGE, [v.model_dump(mode="json") for v in verdicts])
        assert shown == [v.label() for v in verdicts]
        [pending] = (await conversations.state(sid, "alice")).pending
        assert pending.judged is not None and pending.judged.label() == ESCALATED
        assert ESCALATED in pending.waiting_message()  # the AG-UI interrupt's message


async def test_a_result_the_judge_approved_says_so_live_and_after_a_reload(
    parley_worker, page: Page
) -> None:
    query = call("run_query", "q2", target="staging", sql="select 1")
    model = script({"content": "", "tool_calls": [query]}, {"content": "One row."})
    sid = f"web-{new_session()[2:]}"
    async with page_gateway(parley_worker, registry(judged_rule()), model, page) as (
        base,
        _,
    ):
        await sign_in_and_start(page, base, sid)
        await send(page, "count the rows on staging")
        approved = "approved by judge: read-only query on staging"
        result = page.get_by_test_id("tool-result").filter(has_text="run_query")
        await expect(result.get_by_test_id("result-judged")).to_have_text(approved)
        await page.reload()
        await expect(result.get_by_test_id("result-judged")).to_have_text(approved)


async def test_the_webhook_tells_escalate_to_with_the_verdict(parley_worker) -> None:
    rules = registry(judged_rule(escalate_to="priya"))
    with Webhook(200) as webhook:
        async with parley_worker(rules, analytics_model(), notify_url=webhook.url) as conversations:
            sid = new_session()
            turn = await conversations.send(sid, "alice", "count the rows on analytics")
            assert turn.status == "awaiting_approval"

            def to_priya():
                bodies = [body for _, body in webhook.requests]
                return [b for b in bodies if "waits for priya" in b.get("text", "")]

            [body] = await eventually(to_priya, what="the webhook tells priya")
            assert f"({ESCALATED})" in body["text"]
            [sent] = body["pending"]
            assert sent["judged"]["verdict"] == "escalate" and sent["judged"]["model"] == CAREFUL


def test_parley_tools_lists_each_rules_judge_and_refuses_one_that_does_not_load(
    tmp_path: Path,
) -> None:
    file = tmp_path / "policies.toml"
    rule = (
        '[[rule]]\nname = "queries-judged"\ntool = "run_query"\ndecide = "confirm"\n'
        f'judge = "model"\njudge_model = "{CAREFUL}"\non_doubt = "deny"\n'
    )
    file.write_text(rule, encoding="utf-8")
    env = {**NOWHERE, "PARLEY_TOOLS": "tests.support.judges:tools", "PARLEY_POLICIES": str(file)}
    shown = CliRunner().invoke(app, ["tools"], env=env)
    assert shown.exit_code == 0, shown.output
    listed = " ".join(shown.stdout.split())
    assert f"queries-judged: run_query -> confirm; judged first by {CAREFUL} (in doubt: deny)" in (
        listed
    )
    file.write_text(rule.replace(CAREFUL, "tests.support.judges:nobody"), encoding="utf-8")
    refused = CliRunner().invoke(app, ["tools"], env=env)
    assert refused.exit_code == 1 and refused.stdout == ""
    assert refused.stderr == (
        "error: PARLEY_POLICIES: rule 'queries-judged': judge_model "
        "'tests.support.judges:nobody' does not load: cannot load "
        "tests.support.judges:nobody: module 'tests.support.judges' has no attribute 'nobody'\n"
    )
