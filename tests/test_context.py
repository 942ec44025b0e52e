"""A bounded model context: a long conversation with large tool results, against a
provider (the real langchain-openai client and a local server speaking the OpenAI
protocol) that refuses any request past its 32,000-token window.

The conversation is compacted by ``compact_context`` before it would pass the budget:
the provider never refuses, the latest messages reach it whole, and every original
message can still be read from the transcript. ``PARLEY_TEST_CONTEXT_TURNS`` sets the
length (CI runs a short one; 1,000 turns have run with the same test).
"""

from __future__ import annotations

import os
from typing import Annotated

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.tools import InjectedToolArg, tool

from parley.activities.compaction import SUMMARY_HEADING, SUMMARY_INSTRUCTIONS
from parley.contracts import ToolContext
from parley.tools import auto
from tests.support import registry
from tests.support.openai_env import openai_model
from tests.support.openai_fake import FakeOpenAI
from tests.support.openai_script import RecordedRequest, ScriptedReply
from tests.support.transcripts import new_session

WINDOW = 32_000
TURNS = int(os.environ.get("PARLEY_TEST_CONTEXT_TURNS", "24"))
RESULT_BYTES = 20 * 1024


@tool
async def fetch_report(day: int, context: Annotated[ToolContext, InjectedToolArg]) -> str:
    """Fetch the day's report (about 20 KB of text)."""
    line = f"day {day}: all systems nominal, nothing to report. "
    return (line * (RESULT_BYTES // len(line) + 1))[:RESULT_BYTES]


def answer(request: RecordedRequest) -> ScriptedReply:
    """The provider's side of the conversation: summarize when asked; otherwise fetch
    the report a user message asks for, then say it was read."""
    messages = request.messages
    if (
        messages
        and messages[0]["role"] == "system"
        and messages[0]["content"] == (SUMMARY_INSTRUCTIONS)
    ):
        return ScriptedReply(content=f"Summary: {len(messages[1]['content'])} characters read.")
    last = messages[-1]
    if last["role"] == "user":
        day = int(str(last["content"]).split()[-1])
        call = {"name": "fetch_report", "args": {"day": day}, "id": f"call_{day}"}
        return ScriptedReply(content="", tool_calls=[call])
    return ScriptedReply(content=f"Read the report of {last['tool_call_id']}.")


pytestmark = pytest.mark.fake_openai(context_window=WINDOW, responder=answer)


async def test_a_long_conversation_with_large_results_stays_inside_the_window(
    parley_worker, fake: FakeOpenAI
) -> None:
    sid = new_session()
    async with parley_worker(
        registry(auto(fetch_report)), openai_model(), model_context_tokens=WINDOW
    ) as conversations:
        for day in range(1, TURNS + 1):
            turn = await conversations.send(sid, "alice", f"read the report of day {day}")
            assert turn.status == "completed", turn.error
        state = await conversations.state(sid, "alice")
        first = await conversations.transcript(sid, "alice", offset=0, limit=4)

    assert fake.context_refusals == 0
    compactions = [e for e in state.audit if e.event == "compacted"]
    assert compactions, "never compacted"
    assert all(c.detail["tokens_after"] < c.detail["tokens_before"] for c in compactions)
    # the latest messages reached the model whole, after the summary
    last_request = [r for r in fake.requests if r.messages[0]["role"] != "system"][-1]
    sent = last_request.messages
    assert any(SUMMARY_HEADING in str(m.get("content")) for m in sent)
    kept = state.transcript[-4:-1]  # the last turn's message, call and result
    assert [str(m["content"] or "") for m in sent[-3:]] == [str(m.content) for m in kept]
    assert len(str(sent[-1]["content"])) == RESULT_BYTES  # whole, not elided
    # every original message is still readable
    assert isinstance(first[0], HumanMessage) and first[0].content.endswith("day 1")
    assert len(first[2].content) == RESULT_BYTES


async def test_a_message_bigger_than_the_window_fails_its_turn_and_the_conversation_goes_on(
    parley_worker, fake: FakeOpenAI
) -> None:
    sid = new_session()
    async with parley_worker(
        registry(auto(fetch_report)), openai_model(), model_context_tokens=WINDOW
    ) as conversations:
        huge = "word " * (WINDOW * 2)
        failed = await conversations.send(sid, "alice", huge)
        assert failed.status == "failed"
        assert failed.error is not None and "context budget" in failed.error
        assert "\n" not in failed.error
        after = await conversations.send(sid, "alice", "read the report of day 1")
        assert after.status == "completed", after.error


async def test_a_provider_refusal_compacts_harder_and_the_turn_goes_on(
    parley_worker, fake: FakeOpenAI
) -> None:
    """A worker that does not know the model's window (no budget): the provider's
    ``context_length_exceeded`` compacts the conversation, and the call is made again."""
    fake.context_window = 12_000
    sid = new_session()
    async with parley_worker(registry(auto(fetch_report)), openai_model()) as conversations:
        for day in (1, 2, 3, 4):
            turn = await conversations.send(sid, "alice", f"read the report of day {day}")
            assert turn.status == "completed", turn.error
        state = await conversations.state(sid, "alice")

    assert fake.context_refusals >= 1
    compactions = [e for e in state.audit if e.event == "compacted"]
    assert compactions and all(c.detail["harder"] for c in compactions)
    assert len(compactions) == fake.context_refusals  # each refusal compacted once
