"""No tool or model can make Temporal end a run by filling its history within one turn.

Every reply is bounded (``tests/test_reply_limits.py``), but a turn makes up to 8 model
calls of up to 64 tool calls each, and a tool result under 128 KiB stays in history:
about 64 MB in one turn, past the 50 MB at which Temporal terminates a run. Here the
real ``langchain-openai`` client talks to ``FakeOpenAI``, which proposes 64 calls of a
tool returning 120 KB at every call. The turn stops before the tool or model call that
would start past 24 MiB of history, in one line; every call is answered; the run hands
over at its rest (it is continued as new, never terminated), and the next message gets
a normal reply in the new run. While the run is past its hand-over threshold, a message
that would wait for a turn is refused (queued messages cannot keep the run from resting).

Two more inputs that feed history: a tool that fails with megabytes of text (a failure's
message is not a payload and never goes to the store: it is cut), and a front end's
context past the message limit (refused before anything enters history).
"""

from __future__ import annotations

import asyncio

import pytest
from langchain_core.tools import ToolException, tool
from temporalio.client import WorkflowExecutionStatus

from parley.client import ConversationRefused
from parley.contracts import ClientContext, workflow_id_for
from parley.contracts.errors import ErrorType
from parley.contracts.limits import MODEL_TOOL_CALLS_PER_REPLY
from parley.tools import auto
from parley.workflows.lifecycle.handover import HANDOVER_HISTORY_BYTES, MB, TURN_HISTORY_BYTES
from tests.support import registry
from tests.support.openai_env import openai_model, serving_openai
from tests.support.openai_script import RecordedRequest, ScriptedReply
from tests.support.transcripts import new_session, tool_messages
from tests.support.waiting import eventually

KEY = "sk-history-room-0000"
PAGE = 120_000
#: The tool waits at this run until the test releases it (the run is then past its
#: hand-over threshold, and the turn still runs).
HOLD_AT = 100
RUNS: list[int] = []
HELD = asyncio.Event()
RELEASE = asyncio.Event()


@tool
async def bulky_page(n: int) -> str:
    """Page n of a long document (120 KB of text)."""
    RUNS.append(n)
    if len(RUNS) == HOLD_AT:
        HELD.set()
        await RELEASE.wait()
    head = f"page {n}: "
    return head + "x" * (PAGE - len(head))


def respond(request: RecordedRequest) -> ScriptedReply:
    """64 more pages while the model reads pages; a short answer to anything else."""
    messages = request.messages
    if messages[-1]["role"] == "user" and messages[-1]["content"] != "read it all":
        return ScriptedReply("Here is a short answer.")
    rounds = sum(m["role"] == "assistant" for m in messages)
    calls = [
        {"name": "bulky_page", "args": {"n": rounds * 100 + i}, "id": f"p{rounds}-{i}"}
        for i in range(MODEL_TOOL_CALLS_PER_REPLY)
    ]
    return ScriptedReply(None, calls)


async def test_a_turn_that_fills_the_history_stops_and_the_conversation_goes_on(
    parley_worker, client, monkeypatch: pytest.MonkeyPatch
) -> None:
    RUNS.clear()
    HELD.clear()
    RELEASE.clear()
    async with serving_openai(monkeypatch, KEY, responder=respond) as fake:
        sid = new_session()
        async with parley_worker(registry(auto(bulky_page)), openai_model()) as conv:
            turn = asyncio.create_task(conv.send(sid, "alice", "read it all"))
            await eventually(HELD.is_set, 300, f"the tool's run {HOLD_AT}")
            description = await conv.handle(sid).describe()
            first_run = description.run_id
            size = description.raw_description.workflow_execution_info.history_size_bytes
            assert size > HANDOVER_HISTORY_BYTES
            with pytest.raises(ConversationRefused) as refused:
                await conv.send(sid, "alice", "me too", while_busy="enqueue")
            assert refused.value.error_type == ErrorType.HANDING_OVER
            RELEASE.set()
            result = await turn

            assert result.status == "failed", result
            error = result.error or ""
            assert "\n" not in error and "near what Temporal lets one run hold" in error
            assert error.startswith("the turn was stopped before ")
            first = client.get_workflow_handle(workflow_id_for(sid), run_id=first_run)
            log = [e.event for e in (await conv.events(sid, "alice", limit=5_000)).events]
            assert [e["code"] for e in log if e["type"] == "RUN_ERROR"] == [ErrorType.HISTORY_LIMIT]

            # The run rests and hands over: continued as new, never terminated.
            async def handed_over() -> bool:
                status = (await first.describe()).status
                return status == WorkflowExecutionStatus.CONTINUED_AS_NEW

            await eventually(handed_over, 120, "the run continued as new")
            info = (await first.describe()).raw_description.workflow_execution_info
            assert TURN_HISTORY_BYTES < info.history_size_bytes < TURN_HISTORY_BYTES + 8 * MB
            after = await conv.send(sid, "alice", "and now?")
            assert after.status == "completed" and after.reply == "Here is a short answer."
            now = await conv.handle(sid).describe()
            assert now.run_id != first_run and now.status == WorkflowExecutionStatus.RUNNING
            transcript = await conv.transcript(sid, "alice", 0, 1_000)

    answers = tool_messages(transcript)  # every call answered, once: a valid transcript
    ran = [a for a in answers.values() if a.artifact["status"] == "success"]
    assert len(ran) == len(RUNS) < 4 * MODEL_TOOL_CALLS_PER_REPLY
    assert len(answers) > len(ran)  # the rest answered as not run
    assert fake.last_request.messages[-1] == {"role": "user", "content": "and now?"}


@tool
async def failing_lookup(q: str) -> str:
    """Look something up (this one fails, with megabytes of text)."""
    raise ToolException("no such record: " + "e" * (3 * MB))


async def test_a_tool_error_of_megabytes_costs_a_few_kilobytes_of_history(
    parley_worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An activity's failure message is written into history as is (never to the
    store): a tool (an MCP server's too) that raises with 3 MB of text is cut to a few
    kilobytes, and the model reads that."""
    async with serving_openai(monkeypatch, KEY) as fake:
        fake.reply(tool_calls=[{"name": "failing_lookup", "args": {"q": "x"}, "id": "c1"}])
        fake.reply("It failed; sorry.")
        sid = new_session()
        async with parley_worker(registry(auto(failing_lookup)), openai_model()) as conv:
            turn = await conv.send(sid, "alice", "look it up")
            description = await conv.handle(sid).describe()
    assert turn.status == "completed", turn.error
    assert turn.reply == "It failed; sorry."
    (result,) = turn.results
    assert result.error is not None and result.error.type == ErrorType.TOOL_INPUT
    assert len(result.error.message) < 5_000 and "characters in all" in result.error.message
    seen = [m for m in fake.last_request.messages if m["role"] == "tool"]
    assert len(seen[0]["content"]) < 5_000
    size = description.raw_description.workflow_execution_info.history_size_bytes
    assert size < 200 * 1024, f"{size:,} bytes of history"


async def test_a_front_ends_context_over_the_message_limit_is_refused_up_front(
    parley_worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AG-UI context and front-end tool results go into every model call's input of the
    turn: together they take what one message may hold, or the run is refused before
    anything enters history."""
    state = ClientContext(description="the application's state", value="s" * (2 * MB))
    async with serving_openai(monkeypatch, KEY) as fake:
        fake.reply("Here is a short answer.")
        sid = new_session()
        async with parley_worker(registry(), openai_model()) as conv:
            with pytest.raises(ConversationRefused) as refused:
                await conv.send(sid, "alice", "hello", run={"context": [state]})
            assert refused.value.error_type == ErrorType.MESSAGE_TOO_LARGE
            assert "\n" not in refused.value.message
            turn = await conv.send(sid, "alice", "hello")
            description = await conv.handle(sid).describe()
    assert turn.status == "completed" and fake.attempts == 1
    size = description.raw_description.workflow_execution_info.history_size_bytes
    assert size < 200 * 1024
