"""Spend approval: with the policy file's ``[budget] confirm_over_tokens``, a
conversation whose model calls have used that many tokens waits for a decision before
its next model call, like a tool call. Approve goes on and raises the mark by the same
step; reject ends the turn with a reply saying so; both are audited. The tokens are what
a real provider client reported (langchain-openai against a local server speaking the
OpenAI protocol)."""

from __future__ import annotations

from pathlib import Path

import pytest

from parley.client import ConversationRefused
from parley.contracts import SPEND_CALL, Decision, SpendBudget
from parley.tools.policies import load_policies
from tests.support import registry
from tests.support.openai_env import openai_model
from tests.support.openai_fake import FakeOpenAI
from tests.support.policy_tools import planner_registry
from tests.support.transcripts import new_session


def test_the_budget_table_is_read_and_checked(tmp_path: Path) -> None:
    good = tmp_path / "good.toml"
    good.write_text("[budget]\nconfirm_over_tokens = 200000\n")
    assert load_policies(good).budget == SpendBudget(confirm_over_tokens=200_000)
    for text, expected in {
        "[budget]\nconfirm_over_tokens = 0\n": "greater than or equal to 1",
        "[budget]\nconfirm_over = 10\n": "confirm_over",
        "[[budget]]\nconfirm_over_tokens = 10\n": "one [budget] table",
    }.items():
        bad = tmp_path / "bad.toml"
        bad.write_text(text)
        with pytest.raises(ValueError, match="PARLEY_POLICIES") as err:
            load_policies(bad)
        assert expected in str(err.value), str(err.value)


async def test_past_the_mark_the_next_model_call_waits_approve_goes_on_reject_stops(
    parley_worker, fake: FakeOpenAI
) -> None:
    for reply in ("Hello.", "Still here.", "Never sent."):
        fake.reply(reply)
    tools = registry()
    tools.spend = SpendBudget(confirm_over_tokens=10)
    sid = new_session()
    async with parley_worker(tools, openai_model()) as conversations:
        first = await conversations.send(sid, "alice", "hi")
        assert (first.status, first.reply) == ("completed", "Hello.")
        used = first.usage.total_tokens if first.usage else 0
        assert used >= 10  # what the provider reported passed the mark

        waiting = await conversations.send(sid, "alice", "are you there")
        assert waiting.status == "awaiting_approval"
        (call,) = waiting.pending
        assert call.name == SPEND_CALL
        assert call.args == {"total_tokens": used, "mark": 10}
        assert len(fake.requests) == 1  # the model was not called

        with pytest.raises(ConversationRefused, match="approve or reject"):
            await conversations.decide(
                sid,
                "alice",
                [Decision(tool_call_id=call.tool_call_id, action="respond", message="go")],
            )
        approved = await conversations.decide(
            sid, "alice", [Decision(tool_call_id=call.tool_call_id, action="approve")]
        )
        assert (approved.status, approved.reply) == ("completed", "Still here.")

        again = await conversations.send(sid, "alice", "one more")
        (second,) = again.pending
        new_mark = 10 + 10 * ((used - 10) // 10 + 1)  # whole steps past what was used
        assert second.name == SPEND_CALL and second.args["mark"] == new_mark
        rejected = await conversations.decide(
            sid,
            "alice",
            [Decision(tool_call_id=second.tool_call_id, action="reject", message="too dear")],
        )
        assert rejected.status == "completed"
        assert rejected.reply is not None and rejected.reply.startswith("Stopped:")
        assert "too dear" in rejected.reply
        state = await conversations.state(sid, "alice")
        events = [e.event for e in (await conversations.events(sid, "alice")).events]

    assert len(fake.requests) == 2  # the rejected turn called no model
    assert [
        (e.tool_call_id, e.actor, e.detail["action"]) for e in state.audit if e.event == "decided"
    ] == [
        (call.tool_call_id, "alice", "approve"),
        (second.tool_call_id, "alice", "reject"),
    ]
    spending = [e.detail for e in state.audit if e.event == "spending"]
    assert spending == [
        {"action": "approve", "total_tokens": used, "mark": 10, "new_mark": new_mark},
        {"action": "reject", "total_tokens": second.args["total_tokens"], "mark": new_mark},
    ]
    proposed = [e.tool_call_id for e in state.audit if e.event == "proposed"]
    assert proposed == [call.tool_call_id, second.tool_call_id]
    texts = [e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"]
    assert texts[-1] == rejected.reply  # followers see the reply too


LONG = "plan " * 800  # about 1,000 output tokens, as the fake bills them


async def test_the_mark_holds_for_the_tree_of_a_conversation_and_its_subagents(
    parley_worker, fake: FakeOpenAI
) -> None:
    """Each subagent's tokens count in its parent's usage (shown apart too), and the
    mark applies to the whole tree: the parent asks once its subagent's tokens pass it,
    and a subagent asks (on the parent's list) once the tree's do."""
    fake.reply(tool_calls=[{"name": "planner", "args": {"task": "the first quarter"}}])
    fake.reply(LONG)  # the first subagent's whole answer
    fake.reply(tool_calls=[{"name": "planner", "args": {"task": "the second quarter"}}])
    fake.reply(LONG, tool_calls=[{"name": "list_plans", "args": {}}])  # the second's
    fake.reply("Second quarter planned.")
    fake.reply("Both quarters planned.")
    tools = planner_registry()
    tools.spend = SpendBudget(confirm_over_tokens=1_000)
    sid = new_session()
    async with parley_worker(tools, openai_model()) as conversations:
        first = await conversations.send(sid, "alice", "plan two quarters")
        # The parent's own call used less than the mark; its subagent's passed it.
        assert first.status == "awaiting_approval"
        (ask,) = first.pending
        assert ask.name == SPEND_CALL and ask.subagent is None
        billed = [u["total_tokens"] for u in fake.usage_reported]
        assert billed[0] < 1_000 <= billed[0] + billed[1]
        assert ask.args == {"total_tokens": billed[0] + billed[1], "mark": 1_000}
        state = await conversations.state(sid, "alice")
        assert state.usage.total_tokens == sum(billed)  # the tree's
        assert state.subagent_usage.total_tokens == billed[1]  # the subagent's, apart
        assert state.subagent_usage.model_calls == 1

        # Approved: the mark rises to 2,000 for the tree; the second subagent passes it
        # in its own conversation, and asks on the parent's list.
        second = await conversations.decide(
            sid, "alice", [Decision(tool_call_id=ask.tool_call_id, action="approve")]
        )
        assert second.status == "awaiting_approval", second
        (child_ask,) = second.pending
        assert child_ask.name == SPEND_CALL and child_ask.subagent is not None
        billed = [u["total_tokens"] for u in fake.usage_reported]
        assert child_ask.args == {"total_tokens": sum(billed), "mark": 2_000}
        assert len(fake.chat_requests) == 4  # the subagent's next call waits

        third = await conversations.decide(
            sid, "alice", [Decision(tool_call_id=child_ask.tool_call_id, action="approve")]
        )
        # The subagent went on and ended; its tokens took the tree past the mark its
        # approval raised, so the parent asks before its own next call.
        billed = [u["total_tokens"] for u in fake.usage_reported]
        assert len(billed) == 5
        raised = 2_000 + 1_000 * ((child_ask.args["total_tokens"] - 2_000) // 1_000 + 1)
        (parent_ask,) = third.pending
        assert parent_ask.subagent is None
        assert parent_ask.args == {"total_tokens": sum(billed), "mark": raised}
        done = await conversations.decide(
            sid, "alice", [Decision(tool_call_id=parent_ask.tool_call_id, action="approve")]
        )
        assert (done.status, done.reply) == ("completed", "Both quarters planned.")
        state = await conversations.state(sid, "alice")

    billed = [u["total_tokens"] for u in fake.usage_reported]
    assert len(billed) == 6
    assert state.usage.total_tokens == sum(billed)
    assert state.subagent_usage.total_tokens == billed[1] + billed[3] + billed[4]
    assert state.subagent_usage.model_calls == 3
    new_marks = [e.detail["new_mark"] for e in state.audit if e.event == "spending"]
    assert new_marks[0] == 2_000 and new_marks[-1] > raised
    decided = [e.tool_call_id for e in state.audit if e.event == "decided"]
    assert decided == [ask.tool_call_id, child_ask.tool_call_id, parent_ask.tool_call_id]
