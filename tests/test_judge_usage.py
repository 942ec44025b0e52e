"""A rule's judge is a model call the conversation pays for: the tokens its verdict
reports are added to the turn's and the conversation's usage (``parley show``'s usage
line, the snapshot), under the judge's model where usage is counted per model, and
toward the policy file's ``[budget] confirm_over_tokens``: a budget that a judge's
tokens cross makes the next model call wait for a decision. A conversation that a judge
decided in before this (patch ``judge-usage``) still replays. Real dev server and worker;
the agent's model (which reports no tokens) and the judge (132 tokens a verdict,
``tests.support.judges``) are scripted.
"""

from __future__ import annotations

import pytest
from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import Replayer

from parley.cli.rendering import usage_line
from parley.contracts import (
    SPEND_CALL,
    WORKFLOW_ID_PREFIX,
    Decision,
    PolicyRule,
    SpendBudget,
    Usage,
)
from parley.contracts.judging import JudgeVerdict
from parley.tools import ToolRegistry
from parley.workflows.conversation import ConversationWorkflow
from parley.workflows.turn.usage import JUDGE_USAGE, judge_usage
from tests.support.judges import tools
from tests.support.recording_tools import RUNS
from tests.support.scripts import call, script
from tests.support.transcripts import new_session

CAREFUL = "tests.support.judges:careful"


def judged_registry(budget: int | None = None) -> ToolRegistry:
    rule = PolicyRule(
        name="queries-judged",
        tool="run_query",
        decide="confirm",
        judge="model",
        judge_model=CAREFUL,
        judge_instructions="approve read-only queries on staging",
    )
    registry = ToolRegistry(tools(), rules=[rule])
    if budget is not None:
        registry.spend = SpendBudget(confirm_over_tokens=budget)
    return registry


def query(call_id: str, target: str) -> dict:
    return {
        "content": "",
        "tool_calls": [call("run_query", call_id, target=target, sql="select 1")],
    }


async def test_the_judges_tokens_are_the_turns_and_the_conversations_usage(
    parley_worker,
) -> None:
    """A deny and, in the next turn, an approve: each verdict's 132 tokens and its model
    call are counted, on the turn, the snapshot and ``parley show``'s usage line."""
    model = script(
        query("q1", "prod"), {"content": "Refused."}, query("q2", "staging"), {"content": "Ok."}
    )
    async with parley_worker(judged_registry(), model) as conversations:
        sid = new_session()
        denied = await conversations.send(sid, "alice", "count the rows on prod")
        assert denied.status == "completed" and denied.results[0].status == "rejected"
        assert denied.usage is not None
        assert (denied.usage.total_tokens, denied.usage.model_calls) == (132, 3)
        approved = await conversations.send(sid, "alice", "count the rows on staging")
        assert approved.status == "completed" and approved.results[0].status == "success"
        assert approved.usage is not None and approved.usage.total_tokens == 132

        state = await conversations.state(sid, "alice")
        assert state.usage is not None
        assert (state.usage.input_tokens, state.usage.output_tokens) == (240, 24)
        assert (state.usage.total_tokens, state.usage.model_calls) == (264, 6)
        assert state.usage.by_model is None  # one agent model: not counted per model
        audited = [e.detail["usage"] for e in state.audit if e.event == "judged"]
        assert [u["total_tokens"] for u in audited] == [132, 132]
        assert usage_line(state.usage) == "usage: 264 tokens (240 in, 24 out) over 6 model calls"


async def test_a_budget_the_judges_tokens_cross_makes_the_next_model_call_wait(
    parley_worker,
) -> None:
    """The agent's model reports no tokens: only the judge's 132 pass the mark of 100,
    so the model call after the judged call ran waits as a spending call."""
    RUNS.clear()
    model = script(query("q3", "staging"), {"content": "Done."})
    async with parley_worker(judged_registry(budget=100), model) as conversations:
        sid = new_session()
        turn = await conversations.send(sid, "alice", "count the rows on staging")
        assert [r["target"] for r in RUNS if r["tool"] == "run_query"] == ["staging"]
        assert turn.status == "awaiting_approval", turn
        [spend] = turn.pending
        assert spend.name == SPEND_CALL
        assert spend.args == {"total_tokens": 132, "mark": 100}
        go_on = [Decision(tool_call_id=spend.tool_call_id, action="approve")]
        done = await conversations.decide(sid, "alice", go_on)
        assert (done.status, done.reply) == ("completed", "Done.")


async def test_a_conversation_judged_before_the_tokens_counted_replays(
    parley_worker, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Recorded as the worker before this change ran it (``judge-usage`` not patched:
    the judge's tokens not counted, so the mark is not crossed and the turn goes on),
    the history replays on today's workflow, which then counts nothing either."""
    patched = workflow.patched
    monkeypatch.setattr(workflow, "patched", lambda name: name != JUDGE_USAGE and patched(name))
    model = script(query("q4", "staging"), {"content": "Done."})
    async with parley_worker(judged_registry(budget=100), model) as conversations:
        sid = new_session()
        turn = await conversations.send(sid, "alice", "count the rows on staging")
        assert turn.status == "completed" and turn.usage is not None
        assert turn.usage.total_tokens == 0  # as before: the judge's tokens not counted
        history = await client.get_workflow_handle(f"{WORKFLOW_ID_PREFIX}{sid}").fetch_history()
    monkeypatch.setattr(workflow, "patched", patched)
    replayer = Replayer(workflows=[ConversationWorkflow], data_converter=client.data_converter)
    await replayer.replay_workflow(history)


def test_a_judges_usage_is_one_model_call_under_its_model_when_counted_per_model() -> None:
    reported = {"input_tokens": 120, "output_tokens": 12, "total_tokens": 132}
    verdict = JudgeVerdict(
        verdict="approve", reason="fine", model=CAREFUL, args_hash="aaaa", usage=reported
    )
    alone = Usage(input_tokens=120, output_tokens=12, total_tokens=132, model_calls=1)
    assert judge_usage(verdict, per_model=False) == alone
    per_model = judge_usage(verdict, per_model=True)
    assert per_model is not None and per_model.by_model == {CAREFUL: alone}
    # A verdict from a model that reports no tokens is still a model call.
    silent = judge_usage(verdict.model_copy(update={"usage": {}}), per_model=False)
    assert silent == Usage(model_calls=1)
    # No worker answered, or the judge's model failed before reporting: no call counted.
    failed = verdict.model_copy(update={"verdict": "escalate", "failed": True, "usage": {}})
    assert judge_usage(failed, per_model=False) is None
    doubted = failed.model_copy(update={"usage": reported})
    assert judge_usage(doubted, per_model=False) == alone
